// Fleet: every worker with its state, load and a bar per resource showing what
// it advertised, what the matcher counts as free, and what running work has
// reserved. Read from GET /workers: a replica answers it for the whole fleet,
// and it costs the core a fraction of GET /status. A page of rows at a time,
// so a fleet of thousands stays quick.

import { api } from "./api.js";
import { field, h, replace } from "./dom.js";
import { ago, bytes, labels, num } from "./format.js";

const view = { filter: "", state: "", sort: "name", page: 0, size: 50 };

export function workerState(w) {
  if (!w.connected) return "disconnected";
  if (w.paused) return "paused";
  if (w.draining) return "draining";
  return "connected";
}

// One resource as a bar: reserved (solid), held by other load (hatched), free (empty).
function meter(kind, total, free, reserved, observed, show) {
  total = num(total);
  free = Math.min(num(free), total);
  reserved = Math.min(num(reserved), total);
  const other = Math.max(0, total - reserved - free);
  const pct = (n) => (total > 0 ? `${(100 * n) / total}%` : "0%");
  const text = total > 0 ? `${show(free)} free of ${show(total)}` : "none";
  const aria = `${kind}: ${text}, ${show(reserved)} reserved, ${show(observed)} observed free`;
  return h("div", {
    class: "meter",
    dataset: { resource: kind, total, free, reserved, observed: num(observed) },
    title: aria,
  },
  h("span", {}, h("b", {}, kind), " ", text, reserved > 0 ? ` · ${show(reserved)} reserved` : ""),
  h("div", { class: "bar", role: "img", "aria-label": aria },
    h("span", { class: "reserved", style: { width: pct(reserved) } }),
    h("span", { class: "used", style: { width: pct(other) } })));
}

export function meters(w) {
  const r = w.resources || {};
  const reserved = w.reserved || {};
  const free = w.free || {};
  const count = (n) => String(num(n));
  const gpus = r.gpus || [];
  const gpuIdle = gpus.filter((g) => num(g.memory_free) > 0).length;
  return h("div", { class: "meters" },
    meter("cpu", r.cpu_total, free.cpu, reserved.cpu, r.cpu_available, count),
    meter("memory", r.memory_total, free.memory, reserved.memory, r.memory_available, bytes),
    meter("gpu", gpus.length, free.gpus, (reserved.gpu_indices || []).length, gpuIdle, count),
    meter("disk", r.disk_total, free.disk, reserved.disk, r.disk_free, bytes));
}

function matches(w, text, state) {
  if (state && workerState(w) !== state) return false;
  if (!text) return true;
  const hay = [w.name, ...labels(w.labels), w.transport, ...(w.runtimes || [])].join(" ").toLowerCase();
  return text.toLowerCase().split(/\s+/).every((word) => hay.includes(word));
}

const SORTS = {
  name: (a, b) => a.name.localeCompare(b.name),
  busiest: (a, b) => num(b.active_executions) / (num(b.capacity) || 1) - num(a.active_executions) / (num(a.capacity) || 1)
    || a.name.localeCompare(b.name),
  state: (a, b) => workerState(a).localeCompare(workerState(b)) || a.name.localeCompare(b.name),
};

function row(w, ctx, now) {
  const state = workerState(w);
  const paused = Boolean(w.paused);
  const action = paused ? "Resume" : "Pause";
  return h("tr", { dataset: { worker: w.name, state } },
    h("th", { scope: "row" }, h("span", { class: "mono" }, w.name),
      h("div", { class: "muted" }, `seen ${ago(w.last_seen_ms, now)}`)),
    h("td", {}, h("div", { class: "chips" }, labels(w.labels).map((l) => h("span", { class: "chip" }, l)))),
    h("td", {}, w.transport || "—"),
    h("td", {}, (w.runtimes || []).join(", ") || "—"),
    h("td", {}, h("span", { class: `badge s-${state}`, dataset: { role: "state" } }, state)),
    h("td", { class: "num", dataset: { role: "running" } }, `${num(w.active_executions)} / ${num(w.capacity)}`),
    h("td", {}, meters(w)),
    h("td", {}, h("button", {
      type: "button",
      dataset: { focus: `${action}:${w.name}`, action: action.toLowerCase() },
      "aria-label": `${action} worker ${w.name}`,
      disabled: !w.connected && !paused,
      onclick: () => ctx.act(`${action} ${w.name}`, () => (paused ? api.resume(w.name) : api.pause(w.name))),
    }, action)));
}

export function mount(container, ctx) {
  const body = h("div", { id: "fleet-body" });
  const search = h("input", { id: "fleet-filter", type: "search", value: view.filter, placeholder: "name, label, transport",
    oninput: (e) => { view.filter = e.target.value; view.page = 0; draw(); } });
  const state = h("select", { id: "fleet-state", onchange: (e) => { view.state = e.target.value; view.page = 0; draw(); } },
    ["", "connected", "paused", "draining", "disconnected"].map((s) =>
      h("option", { value: s, selected: s === view.state }, s || "any")));
  const sort = h("select", { id: "fleet-sort", onchange: (e) => { view.sort = e.target.value; draw(); } },
    Object.keys(SORTS).map((s) => h("option", { value: s, selected: s === view.sort }, s)));
  const size = h("select", { id: "fleet-size", onchange: (e) => { view.size = Number(e.target.value); view.page = 0; draw(); } },
    [25, 50, 100, 200].map((n) => h("option", { value: n, selected: n === view.size }, n)));
  container.append(
    h("h2", {}, "Fleet"),
    h("div", { class: "toolbar", role: "search" },
      field("Filter", search),
      field("State", state),
      field("Sort", sort),
      field("Per page", size)),
    h("div", { class: "legend", "aria-hidden": "true" },
      h("span", { class: "l-reserved" }, "reserved by running work"),
      h("span", { class: "l-used" }, "busy otherwise (observed)"),
      h("span", { class: "l-free" }, "free to the matcher")),
    body);

  function draw() {
    const resource = ctx.res.workers;
    if (resource.data === undefined) {
      replace(body, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const all = resource.data.workers || [];
    const shown = all.filter((w) => matches(w, view.filter, view.state)).sort(SORTS[view.sort]);
    const pages = Math.max(1, Math.ceil(shown.length / view.size));
    view.page = Math.min(view.page, pages - 1);
    const start = view.page * view.size;
    const now = Date.now();
    const go = (page) => { view.page = page; draw(); };
    const pager = h("div", { class: "pager" },
      h("button", { type: "button", "data-focus": "prev", disabled: view.page === 0, onclick: () => go(view.page - 1) }, "Previous"),
      h("span", { id: "fleet-count" }, shown.length
        ? `${start + 1}–${Math.min(start + view.size, shown.length)} of ${shown.length} workers` + (shown.length !== all.length ? ` (${all.length} known)` : "")
        : `0 of ${all.length} workers`),
      h("button", { type: "button", "data-focus": "next", disabled: view.page >= pages - 1, onclick: () => go(view.page + 1) }, "Next"));
    replace(body,
      pager,
      shown.length === 0
        ? h("p", { class: "muted" }, all.length ? "No worker matches." : "No worker is known yet: start one with flux start worker NAME.")
        : h("table", { id: "fleet", "aria-label": "Workers" },
          h("thead", {}, h("tr", {}, ["Worker", "Labels", "Transport", "Runtime", "State", "Running", "Resources", "Action"]
            .map((t) => h("th", { scope: "col", class: t === "Running" ? "num" : undefined }, t)))),
          h("tbody", {}, shown.slice(start, start + view.size).map((w) => row(w, ctx, now)))));
  }

  const off = ctx.res.workers.subscribe(draw);
  draw();
  ctx.live.show(["workers"]);
  return off;
}
