// Queue: pending work grouped by requirement shape (as GetStatus groups it),
// each with its count, oldest wait and explain's summary; opening a shape
// explains its oldest execution worker by worker. Below, the latest queued
// executions, each opening its own detail (with its own explanation).

import { api } from "./api.js";
import { h, replace } from "./dom.js";
import { verdicts } from "./explain.js";
import { ago, duration, num, requests } from "./format.js";

// Shapes opened, by their oldest execution id, with the latest explanation read.
const opened = new Map();

function shapeKey(shape) {
  return JSON.stringify([shape.requests || {}, shape.affinity || {}]);
}

// Worker pools (flux pool list): the demand an autoscaler (KEDA) scales each pool to.
function pools(list) {
  if (list.length === 0) return "";
  return h("table", { id: "pools" },
    h("caption", {}, "Worker pools"),
    h("thead", {}, h("tr", {}, ["Pool", "Workers", "Busy", "Pending", "Running", "Demand", "Min / max", "Source"]
      .map((t) => h("th", { scope: "col", class: ["Pool", "Source", "Min / max"].includes(t) ? undefined : "num" }, t)))),
    h("tbody", {}, list.map((p) => h("tr", { dataset: { pool: p.spec.name, active: p.active ? "true" : "false" } },
      h("th", { scope: "row" }, p.spec.name),
      h("td", { class: "num", dataset: { role: "workers" } }, num(p.workers)),
      h("td", { class: "num" }, num(p.busy_workers)),
      h("td", { class: "num", dataset: { role: "pending" } }, num(p.pending)),
      h("td", { class: "num" }, num(p.running)),
      h("td", { class: "num", dataset: { role: "demand" } }, num(p.demand_workers)),
      h("td", {}, `${num(p.spec.min_workers)} / ${num(p.spec.max_workers) || "∞"}`),
      h("td", {}, p.spec.source || "—")))));
}

export function mount(container, ctx) {
  const body = h("div", { id: "queue-body" });
  const waiting = h("div", { id: "queue-waiting" });
  container.append(h("h2", {}, "Queue"), body, h("h3", {}, "Queued most recently"), waiting);

  async function explain(key, id) {
    try {
      opened.set(key, { id, data: await api.explain(id) });
    } catch (error) {
      opened.set(key, { id, error });
    }
    draw();
  }

  function toggle(key, id) {
    if (opened.has(key)) opened.delete(key);
    else {
      opened.set(key, { id });
      explain(key, id);
    }
    draw();
  }

  function draw() {
    const resource = ctx.res.status;
    if (resource.data === undefined) {
      replace(body, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const s = resource.data;
    const shapes = s.pending || [];
    const by = s.pending_by_reason || {};
    const total = Object.values(by).reduce((a, b) => a + num(b), 0);
    const cards = h("div", { class: "cards" },
      h("div", { class: "card", id: "queue-total" }, h("b", {}, total), "pending"),
      ["busy", "infeasible", "no_worker"].map((reason) =>
        h("div", { class: "card", dataset: { reason } }, h("b", {}, num(by[reason])), reason.replace("_", " "))));
    const rows = shapes.map((shape) => {
      const key = shapeKey(shape);
      const open = opened.get(key);
      const id = shape.oldest_execution_id;
      const main = h("tr", { dataset: { shape: key, reason: shape.reason, workflow: shape.oldest_workflow } },
        h("th", { scope: "row" }, requests(shape.requests, shape.affinity)),
        h("td", { class: "num", dataset: { role: "count" } }, num(shape.count)),
        h("td", { class: "num" }, duration(shape.oldest_wait_ms)),
        h("td", {}, h("span", { class: `badge s-${shape.reason}` }, (shape.reason || "").replace("_", " "))),
        h("td", {}, shape.summary || "—"),
        h("td", {}, h("a", { href: `#/executions/${encodeURIComponent(id)}`, class: "mono" }, shape.oldest_workflow || id)),
        h("td", {}, h("button", {
          type: "button", "aria-expanded": open ? "true" : "false", "data-focus": `why:${key}`,
          "aria-label": `Why is ${shape.oldest_workflow || "this shape"} waiting? Per-worker reasons`,
          onclick: () => toggle(key, id),
        }, open ? "Hide" : "Why?")));
      if (!open) return main;
      const inner = open.error ? h("p", { class: "error" }, open.error.message)
        : open.data ? verdicts(open.data) : h("p", { class: "muted" }, "Asking the matcher…");
      return [main, h("tr", { class: "expanded" }, h("td", { colspan: 7 }, inner))];
    });
    replace(body, cards, pools(s.pools || []),
      shapes.length === 0
        ? h("p", { class: "muted", id: "queue-empty" }, "Nothing is waiting.")
        : h("table", { id: "queue" },
          h("thead", {}, h("tr", {}, ["Requirements", "Count", "Oldest wait", "Reason", "Summary", "Oldest", ""]
            .map((t) => h("th", { scope: "col", class: ["Count", "Oldest wait"].includes(t) ? "num" : undefined }, t)))),
          h("tbody", {}, rows)),
      num(s.pending_shapes_omitted) ? h("p", { class: "muted" }, `${num(s.pending_shapes_omitted)} more shapes not listed.`) : "");
  }

  function drawWaiting() {
    const resource = ctx.res.pending;
    if (resource.data === undefined) {
      replace(waiting, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const list = resource.data.executions || [];
    replace(waiting, list.length === 0 ? h("p", { class: "muted" }, "None.")
      : h("table", { id: "queue-executions" },
        h("thead", {}, h("tr", {}, ["Execution", "Workflow", "Attempt", "Submitted"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, list.map((e) => h("tr", { dataset: { execution: e.execution_id } },
          h("th", { scope: "row" }, h("a", { class: "mono", href: `#/executions/${encodeURIComponent(e.execution_id)}` }, e.execution_id)),
          h("td", {}, e.workflow?.name || "—"),
          h("td", { class: "num" }, num(e.attempt)),
          h("td", {}, ago(e.created_at_ms)))))));
  }

  // Open explanations are re-read with the queue, so their reasons follow the fleet.
  const offStatus = ctx.res.status.subscribe(() => {
    draw();
    for (const [key, open] of opened) if (open.data || open.error) explain(key, open.id);
  });
  const offPending = ctx.res.pending.subscribe(drawWaiting);
  draw();
  drawWaiting();
  ctx.live.show(["status", "pending"]);
  return () => {
    offStatus();
    offPending();
  };
}
