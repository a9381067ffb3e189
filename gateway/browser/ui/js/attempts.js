// An execution's attempts, as its JSON lists them (each ended try: its worker, when it ran,
// why it ended, what it raised), and, while a retry waits out its backoff, when the next try is.

import { h } from "./dom.js";
import { duration, num, state, time } from "./format.js";

export function attempts(execution, now = Date.now()) {
  const tried = execution.attempts || [];
  const notBefore = num(execution.not_before_ms);
  const waiting = state(execution.state) === "CREATED" && notBefore > 0;
  if (!tried.length && !waiting) return "";
  const most = num(execution.policy?.retry?.max_attempts);
  const rows = tried.map((a) => {
    const error = a.error_type ? `${a.error_type}${a.error_message ? `: ${a.error_message}` : ""}` : "";
    return h("tr", { dataset: { attempt: String(num(a.attempt)), reason: a.reason || "" } },
      h("td", {}, most ? `${num(a.attempt)} of ${most}` : String(num(a.attempt))),
      h("td", { class: "mono" }, a.worker || "—"),
      h("td", {}, time(a.started_at_ms)),
      h("td", {}, time(a.ended_at_ms)),
      h("td", {}, a.reason || "—"),
      h("td", { class: error ? "error" : "muted" }, error || "—"));
  });
  return [
    h("h3", {}, "Attempts"),
    waiting
      ? h("p", { id: "next-try", dataset: { at: String(notBefore) } },
        `Attempt ${num(execution.attempt)} waits to be tried: next try at ${time(notBefore)}`,
        notBefore > now ? ` (in ${duration(notBefore - now)})` : "")
      : "",
    tried.length
      ? h("table", { id: "attempts", "aria-label": "Attempts" },
        h("thead", {}, h("tr", {}, ["Attempt", "Worker", "Started", "Ended", "Reason", "Error"].map((t) => h("th", {}, t)))),
        h("tbody", {}, rows))
      : "",
  ];
}
