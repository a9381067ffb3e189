// Executions: the store's list, newest first, filtered by state, workflow and
// worker (kept in the URL's hash), a page at a time.

import { api } from "./api.js";
import { field, h, replace } from "./dom.js";
import { ago, FINAL, num, STATES, state, time } from "./format.js";

// Tokens of the pages before this one, so "Newer" can step back.
let pages = [];

export function filters(params) {
  return {
    state: params.getAll("state"),
    workflow: params.get("workflow") || "",
    worker: params.get("worker") || "",
    page_token: params.get("page") || "",
    limit: 50,
  };
}

function hashFor(values) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) if (value) params.set(name, value);
  const query = params.toString();
  return `#/executions${query ? `?${query}` : ""}`;
}

export function cancelButton(execution, ctx) {
  const final = FINAL.has(state(execution.state));
  if (final) return "";
  return h("button", {
    type: "button", class: "danger", dataset: { focus: `cancel:${execution.execution_id}`, action: "cancel" },
    "aria-label": `Cancel execution ${execution.execution_id}`,
    onclick: () => {
      if (confirm(`Cancel execution ${execution.execution_id} (${execution.workflow?.name || "workflow"})?`)) {
        ctx.act(`Cancel ${execution.execution_id}`, () => api.cancel(execution.execution_id));
      }
    },
  }, "Cancel");
}

export function mount(container, ctx) {
  const current = filters(ctx.route.params);
  if (!current.page_token) pages = [];
  const workflowList = h("datalist", { id: "workflow-names" });
  const workerList = h("datalist", { id: "worker-names" });
  const form = h("form", { class: "toolbar", role: "search", "aria-label": "Filter executions",
    onsubmit: (e) => {
      e.preventDefault();
      pages = [];
      const data = new FormData(form);
      ctx.navigate(hashFor({ state: data.get("state"), workflow: data.get("workflow").trim(), worker: data.get("worker").trim() }));
    } },
  field("State",
    h("select", { id: "filter-state", name: "state", onchange: () => form.requestSubmit() },
      h("option", { value: "" }, "any"),
      STATES.map((s) => h("option", { value: s, selected: current.state.includes(s) }, s.toLowerCase())))),
  field("Workflow",
    h("input", { id: "filter-workflow", name: "workflow", list: "workflow-names", value: current.workflow, autocomplete: "off" })),
  field("Worker",
    h("input", { id: "filter-worker", name: "worker", list: "worker-names", value: current.worker, autocomplete: "off" })),
  h("button", { type: "submit" }, "Apply"),
  h("button", { type: "button", onclick: () => { pages = []; ctx.navigate("#/executions"); } }, "Clear"),
  workflowList, workerList);
  const body = h("div", { id: "executions-body" });
  container.append(h("h2", {}, "Executions"), form, body);

  function draw() {
    const resource = ctx.res.executions;
    if (resource.data === undefined) {
      replace(body, h("p", { class: resource.error ? "error" : "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const list = resource.data.executions || [];
    const next = resource.data.next_page_token || "";
    const go = (token, back) => {
      if (back) pages.pop();
      else pages.push(current.page_token);
      ctx.navigate(hashFor({ state: current.state[0], workflow: current.workflow, worker: current.worker, page: token }));
    };
    replace(body,
      resource.error ? h("p", { class: "error" }, resource.error.message) : "",
      list.length === 0 ? h("p", { class: "muted" }, "No execution matches.")
        : h("table", { id: "executions" },
          h("thead", {}, h("tr", {}, ["Execution", "Workflow", "State", "Worker", "Attempt", "Submitted", "Last change", ""]
            .map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, list.map((e) => h("tr", { dataset: { execution: e.execution_id, state: state(e.state) } },
            h("th", { scope: "row" }, h("a", { class: "mono", href: `#/executions/${encodeURIComponent(e.execution_id)}` }, e.execution_id)),
            h("td", {}, `${e.workflow?.name || "—"} v${num(e.workflow?.version)}`),
            h("td", {}, h("span", { class: `badge s-${state(e.state)}` }, state(e.state).toLowerCase())),
            h("td", { class: "mono" }, e.worker || "—"),
            h("td", { class: "num" }, num(e.attempt)),
            h("td", { title: time(e.created_at_ms) }, ago(e.created_at_ms)),
            h("td", { title: time(e.updated_at_ms) }, ago(e.updated_at_ms)),
            h("td", {}, cancelButton(e, ctx)))))),
      h("div", { class: "pager" },
        h("button", { type: "button", disabled: !current.page_token, onclick: () => go(pages[pages.length - 1] || "", true) }, "Newer"),
        h("button", { type: "button", disabled: !next, onclick: () => go(next, false) }, "Older")));
  }

  function fillLists() {
    const names = (ctx.res.workflows.data?.workflows || []).map((w) => w.name);
    replace(workflowList, names.map((n) => h("option", { value: n })));
    const workers = (ctx.res.workers.data?.workers || []).slice(0, 2000).map((w) => w.name);
    replace(workerList, workers.map((n) => h("option", { value: n })));
  }

  const offs = [ctx.res.executions.subscribe(draw), ctx.res.workflows.subscribe(fillLists), ctx.res.workers.subscribe(fillLists)];
  ctx.res.executions.data = undefined;
  draw();
  fillLists();
  ctx.live.show(["executions", "workflows"]);
  return () => offs.forEach((off) => off());
}
