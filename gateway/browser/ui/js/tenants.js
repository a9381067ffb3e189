// Tenants: what each tenant's scheduled and running work holds against its
// nominal quota, per resource, and how much of its work waits. Read from
// GET /status (its `tenants`: every tenant, while any has terms), whose
// X-Flux-Tenant and X-Flux-Role headers say whose token the page holds: a
// cluster admin sees every tenant status reports, any other token its own tenant only.

import { h, replace } from "./dom.js";
import { bytes, num } from "./format.js";

const count = (n) => String(num(n));
// As the fleet's meters show them: cores, GPUs and executions counted, memory and VRAM in bytes.
// Executions: every scheduled or running one counts one, whatever it requests.
const RESOURCES = [["cpu", count], ["memory", bytes], ["gpu", count], ["gpu_memory", bytes], ["executions", count]];

// One resource: used of quota, as a bar; "no limit" where the quota is absent (the JSON leaves it out).
function meter(kind, used, quota, show) {
  const limited = quota !== undefined && quota !== null;
  const n = num(used);
  const q = num(quota);
  const over = limited && n > q;
  const text = limited ? `${show(n)} of ${show(q)}` : `${show(n)} used · no limit`;
  const aria = `${kind}: ${limited ? `${show(n)} used of a quota of ${show(q)}${over ? ", over it (borrowed)" : ""}` : `${show(n)} used, no limit`}`;
  const pct = limited ? (q > 0 ? Math.min(100, (100 * n) / q) : (n > 0 ? 100 : 0)) : 0;
  return h("div", {
    class: "meter",
    dataset: { resource: kind, used: n, quota: limited ? q : "none", over: over ? "true" : "false" },
    title: aria,
  },
  h("span", { dataset: { role: "amount" } }, h("b", {}, kind), " ", text),
  h("div", { class: `bar${limited ? "" : " unlimited"}`, role: "img", "aria-label": aria },
    h("span", { class: over ? "over" : "reserved", style: { width: `${pct}%` } })));
}

function row(t) {
  const usage = t.usage || {};
  const quota = t.quota || {};
  return h("tr", { dataset: { tenant: t.name } },
    h("th", { scope: "row" }, h("span", { class: "mono" }, t.name)),
    h("td", {}, h("div", { class: "meters" }, RESOURCES.map(([kind, show]) => meter(kind, usage[kind], quota[kind], show)))),
    h("td", { class: "num", dataset: { role: "pending" } }, num(t.pending)));
}

function table(id, label, list) {
  return h("table", { id, "aria-label": label },
    h("thead", {}, h("tr", {}, ["Tenant", "Usage of quota", "Pending"]
      .map((t) => h("th", { scope: "col", class: t === "Pending" ? "num" : undefined }, t)))),
    h("tbody", {}, list.map(row)));
}

// Who the page is signed in as, from GET /status's headers (api.js puts them on the answer).
export function caller(status) {
  return (status && status.caller) || { tenant: "", role: "" };
}

export function mount(container, ctx) {
  const body = h("div", { id: "tenants-body" });
  container.append(h("h2", { id: "tenants-title" }, "Tenants"), body);

  function draw() {
    const resource = ctx.res.status;
    if (resource.data === undefined) {
      replace(body, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const s = resource.data;
    const all = s.tenants || [];
    const who = caller(s);
    const legend = h("div", { class: "legend", "aria-hidden": "true" },
      h("span", { class: "l-reserved" }, "held by scheduled and running work"),
      h("span", { class: "l-over" }, "above quota (borrowed from its cohort)"),
      h("span", { class: "l-free" }, "quota left"));
    // Without the headers (a gateway that does not send them) the page cannot tell, and shows what status has.
    if (who.role === "cluster-admin" || !who.tenant) {
      replace(body,
        h("p", { class: "muted", id: "tenants-scope" }, "Every tenant, while any has terms (a quota, a cohort or a weight)."),
        legend,
        all.length === 0
          ? h("p", { class: "muted", id: "tenants-empty" }, "No tenant has terms yet: flux tenant create NAME --cpu N sets a quota.")
          : table("tenants", "Tenants", all));
      return;
    }
    const own = all.find((t) => t.name === who.tenant);
    replace(body,
      h("p", { id: "tenants-scope" }, "Signed in as tenant ", h("b", { class: "mono" }, who.tenant),
        ` with a ${who.role} token: this is your tenant's usage against its quota.`),
      legend,
      own
        ? table("tenant-own", `Tenant ${who.tenant}`, [own])
        : h("p", { class: "muted", id: "tenants-empty" },
          `No tenant has terms now (a quota, a cohort or a weight): nothing tenant ${who.tenant} runs has a limit.`));
  }

  const off = ctx.res.status.subscribe(draw);
  draw();
  ctx.live.show(["status"]);
  return off;
}
