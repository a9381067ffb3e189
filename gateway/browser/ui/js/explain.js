// One execution's per-worker verdicts, as ExplainExecution gives them.

import { h } from "./dom.js";

export function verdicts(explanation) {
  const workers = explanation.workers || [];
  const ahead = explanation.queued_ahead;
  return h("div", { class: "verdicts", dataset: { explain: explanation.execution_id } },
    h("p", {}, h("b", {}, explanation.summary || "—"),
      explanation.infeasible ? h("span", { class: "badge s-infeasible" }, " infeasible") : "",
      ahead !== undefined && ahead !== null ? h("span", { class: "muted" }, ` · ${ahead} ahead of it`) : ""),
    workers.length === 0
      ? h("p", { class: "muted" }, "No worker was considered.")
      : h("table", {},
        h("thead", {}, h("tr", {}, ["Worker", "Verdict", "Reasons"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, workers.map((v) => h("tr", { dataset: { verdict: v.worker } },
          h("th", { scope: "row", class: "mono" }, v.worker),
          h("td", {}, v.fits ? h("span", { class: "badge s-fits" }, "fits") : h("span", {
            class: `badge s-${(v.rejections || []).some((r) => r.permanent) ? "infeasible" : "busy"}`,
          }, (v.rejections || []).some((r) => r.permanent) ? "never" : "not now")),
          h("td", {}, (v.rejections || []).map((r) => h("div", {},
            h("span", { class: "mono" }, r.reason), " ", r.detail || "",
            r.wanted || r.offered ? h("span", { class: "muted" }, ` (wants ${r.wanted || "?"}, has ${r.offered || "?"})`) : "")))))),
      ));
}
