// One execution: where it is in its lifecycle, where it ran, what it returned
// or raised, and, while it waits, why (per worker).
//
// The API keeps an execution's creation time and its last change; the times of
// the steps in between are the ones this page saw happen: each read, and each
// event of the execution's feed where the gateway has one, notes the first
// time it found a state. An execution opened after it finished shows those
// steps as passed without a time.

import { api } from "./api.js";
import { attempts } from "./attempts.js";
import { gang } from "./gang.js";
import { h, replace } from "./dom.js";
import { cancelButton } from "./executions.js";
import { verdicts } from "./explain.js";
import { FINAL, num, state, time } from "./format.js";
import { openExecutionStream } from "./stream.js";

const seen = new Map(); // execution id -> Map(state -> ms)
const ORDER = ["CREATED", "SCHEDULED", "RUNNING"];

function note(execution) {
  const id = execution.execution_id;
  if (!seen.has(id)) seen.set(id, new Map());
  const states = seen.get(id);
  const now = state(execution.state);
  if (now === "CREATED" && states.has("SCHEDULED")) states.clear(); // requeued: a new try starts over
  if (!states.has(now)) states.set(now, num(execution.updated_at_ms));
  return states;
}

export async function load(id) {
  const execution = await api.execution(id);
  note(execution);
  const explanation = state(execution.state) === "CREATED" ? await api.explain(id).catch(() => null) : null;
  // A member of a batch (client.map): the whole batch's progress, read with it.
  const batch = execution.batch_id ? (await api.batch(execution.batch_id).catch(() => null))?.batch : null;
  return { execution, explanation, batch };
}

// "3/10 finished · 2 running (max 4) · 5 waiting", and a bar of the finished share.
function batchProgress(b) {
  const total = num(b.total);
  const done = num(b.completed) + num(b.failed) + num(b.cancelled);
  const most = num(b.max_concurrent) ? ` (max ${num(b.max_concurrent)})` : "";
  const parts = [`${done}/${total} finished`, `${num(b.running)} running${most}`, `${num(b.created)} waiting`];
  if (num(b.failed)) parts.push(`${num(b.failed)} failed`);
  if (num(b.cancelled)) parts.push(`${num(b.cancelled)} cancelled`);
  const pct = total ? Math.round((100 * done) / total) : 0;
  return h("span", { id: "batch-progress", dataset: { batch: b.batch_id, finished: String(Boolean(b.finished)) } },
    h("span", { class: "mono" }, b.batch_id), " ", parts.join(" · "),
    h("div", { class: "bar", role: "img", "aria-label": `batch: ${done} of ${total} finished` },
      h("span", { class: "reserved", style: { width: `${pct}%` } })));
}

function timeline(execution) {
  const states = note(execution);
  const now = state(execution.state);
  const reached = FINAL.has(now) ? 3 : ORDER.indexOf(now);
  const steps = [
    ["created", num(execution.created_at_ms), true],
    ["scheduled", states.get("SCHEDULED"), reached >= 1],
    ["running", states.get("RUNNING"), reached >= 2],
    [FINAL.has(now) ? now.toLowerCase() : "final", FINAL.has(now) ? num(execution.updated_at_ms) : 0, FINAL.has(now)],
  ];
  return h("ol", { class: "timeline", "aria-label": "Timeline" }, steps.map(([name, at, done]) =>
    h("li", { dataset: { step: name, reached: String(done), at: at || "" } },
      h("b", {}, name), h("br"),
      h("span", { class: "muted" }, done ? (at ? time(at) : "passed, time not recorded") : "not yet"))));
}

// What it waits for (client.run(..., after=[...])): each dependency links to its own page, and
// while any has not ended as `when` asks, how many it still waits for.
function dependencies(execution) {
  const waiting = num(execution.dependencies_waiting);
  const links = execution.after.map((id, i) => [i ? ", " : "", h("a", { href: `#/executions/${encodeURIComponent(id)}`, class: "mono" }, id)]);
  return h("span", { id: "dependencies" },
    waiting ? `waiting for ${waiting} of ${execution.after.length} (${execution.when || "succeeded"}): ` : `after (${execution.when || "succeeded"}): `,
    links);
}

function output(execution) {
  const text = execution.output_json;
  if (!text) return "";
  let pretty = text;
  try {
    pretty = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    // shown as stored
  }
  return [h("h3", {}, "Output"), h("pre", { id: "output" }, pretty)];
}

function error(execution) {
  const e = execution.error;
  if (!e || (!e.message && !e.type && !e.traceback)) return "";
  return [h("h3", {}, "Error"),
    h("p", { id: "error-message", class: "error" }, h("b", {}, e.type || "Error"), ": ", e.message || ""),
    e.traceback ? h("details", { open: true }, h("summary", {}, "Traceback"), h("pre", { id: "traceback" }, e.traceback)) : ""];
}

export function mount(container, ctx) {
  const id = ctx.route.id;
  const body = h("div", { id: "detail-body" });
  container.append(
    h("p", {}, h("a", { href: "#/executions" }, "← Executions")),
    h("h2", {}, "Execution ", h("span", { class: "mono" }, id)), body);

  function draw() {
    const resource = ctx.res.detail;
    if (resource.data === undefined || resource.data.execution.execution_id !== id) {
      replace(body, h("p", { class: resource.error ? "error" : "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const { execution: e, explanation, batch } = resource.data;
    const s = state(e.state);
    const field = (name, value) => [h("dt", {}, name), h("dd", { dataset: { field: name.toLowerCase() } }, value)];
    replace(body,
      resource.error ? h("p", { class: "error" }, resource.error.message) : "",
      h("p", {}, h("span", { id: "detail-state", class: `badge s-${s}` }, s.toLowerCase()), " ", cancelButton(e, ctx)),
      timeline(e),
      h("h3", {}, "Details"),
      h("dl", { class: "detail" },
        field("Workflow", `${e.workflow?.name || "—"} v${num(e.workflow?.version)}`),
        field("Worker", e.worker ? h("a", { href: `#/executions?worker=${encodeURIComponent(e.worker)}`, class: "mono" }, e.worker) : "—"),
        field("Attempt", num(e.attempt)),
        e.reason ? field("Reason", e.reason) : "",
        (e.after || []).length ? field("Dependencies", dependencies(e)) : "",
        field("Generation", num(e.generation)),
        field("GPUs", (e.gpu_indices || []).length ? e.gpu_indices.join(", ") : "none"),
        field("Submitted", time(e.created_at_ms)),
        field("Last change", time(e.updated_at_ms)),
        field("Input", h("code", {}, e.input_json || "null")),
        batch ? field("Batch", batchProgress(batch)) : ""),
      gang(e),
      attempts(e),
      explanation ? [h("h3", {}, "Why it waits"), verdicts(explanation)] : "",
      output(e),
      error(e));
  }

  // Follow the execution's own feed while it is unfinished: each event is re-read at once,
  // and one that carries the execution (as WatchExecution sends it) times its step exactly.
  let feed = null;
  const follow = (resource) => {
    const e = resource.data?.execution;
    if (!e || e.execution_id !== id) return;
    if (FINAL.has(state(e.state))) {
      feed?.close();
      feed = null;
    } else if (feed === null) {
      feed = openExecutionStream(id, {
        onEvent: (name, data) => {
          try {
            const update = JSON.parse(data);
            if (update && update.execution_id === id && update.state) note(update);
          } catch {
            // not an execution: only a hint that it changed
          }
          ctx.res.detail.refresh();
        },
      });
    }
  };
  const offs = [ctx.res.detail.subscribe(draw), ctx.res.detail.subscribe(follow)];
  draw();
  ctx.live.show(["detail"]);
  return () => {
    offs.forEach((off) => off());
    feed?.close();
  };
}
