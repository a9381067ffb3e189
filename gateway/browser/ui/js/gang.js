// A gang's members, as its JSON lists them (gang_members): each member's rank, worker, the
// address the others reach it at, its GPUs, and how far it got in this attempt.

import { h } from "./dom.js";
import { num } from "./format.js";

function progress(member) {
  if (member.completed) return "completed";
  return member.claimed ? "running" : "dispatched";
}

export function gang(execution) {
  const size = num(execution.gang_size);
  if (!size) return "";
  const members = execution.gang_members || [];
  const rows = members.map((m) =>
    h("tr", { dataset: { rank: String(num(m.rank)), worker: m.worker || "" } },
      h("td", {}, String(num(m.rank)) + (num(m.rank) === 0 ? " (leader)" : "")),
      h("td", { class: "mono" }, h("a", { href: `#/executions?worker=${encodeURIComponent(m.worker || "")}` }, m.worker || "—")),
      h("td", { class: "mono" }, m.address || "—"),
      h("td", {}, (m.gpu_indices || []).length ? m.gpu_indices.join(", ") : "none"),
      h("td", {}, progress(m))));
  return [
    h("h3", {}, `Gang of ${size}`),
    members.length
      ? h("table", { id: "gang-members", "aria-label": "Gang members" },
        h("thead", {}, h("tr", {}, ["Rank", "Worker", "Address", "GPUs", "State"].map((t) => h("th", {}, t)))),
        h("tbody", {}, rows))
      : h("p", { id: "gang-pending", class: "muted" }, "Not placed: every member is placed at once, or none."),
  ];
}
