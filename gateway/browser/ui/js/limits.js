// Limits: flow control in use. Every limit with work in it or waiting on it (a
// workflow's own Concurrency/RateLimit under the workflow's name, and named
// limits), from GET /status's `limits`; below, the tenant's named limits as
// declared (GET /limits), each with its busiest keys now (GET /limits/{name}).
// Totals only in the first table: keys are unbounded, so per-key rows are read
// for the named limits shown, a few keys each.

import { api } from "./api.js";
import { h, replace } from "./dom.js";
import { num } from "./format.js";

// The busiest keys read per named limit; the page reads at most MAX_NAMED limits' keys.
export const TOP_KEYS = 5;
const MAX_NAMED = 20;

// GET /limits, then each limit's top keys: what the Limits view shows below the totals.
export async function load(signal) {
  const listed = (await api.limits(signal)).limits || [];
  const shown = listed.slice(0, MAX_NAMED);
  const details = await Promise.all(shown.map((l) => api.limit(l.name, TOP_KEYS, signal).catch(() => null)));
  return { limits: listed, details: Object.fromEntries(shown.map((l, i) => [l.name, details[i]])) };
}

function totals(list) {
  return h("table", { id: "limit-totals", "aria-label": "Limits in use" },
    h("thead", {}, h("tr", {}, ["Limit", "In use", "Waiting", "Rate-limited"]
      .map((t) => h("th", { scope: "col", class: t === "Limit" ? undefined : "num" }, t)))),
    h("tbody", {}, list.map((l) => h("tr", { dataset: { limit: l.limit } },
      h("th", { scope: "row" }, h("span", { class: "mono" }, l.limit)),
      h("td", { class: "num", dataset: { role: "in-use" } }, num(l.in_use)),
      h("td", { class: "num", dataset: { role: "waiting" } }, num(l.waiting)),
      h("td", { class: "num", dataset: { role: "rate-limited" }, title: "times work waited for a token since the server started" },
        num(l.rate_limited))))));
}

// What a named limit allows, in the words of `flux limit create`'s flags.
function terms(l) {
  const parts = [];
  if (l.concurrency !== undefined && l.concurrency !== null) parts.push(`concurrency ${num(l.concurrency)}`);
  if (l.rate) parts.push(`rate ${l.rate}${Number(l.burst) > 1 ? ` (burst ${num(l.burst)})` : ""}`);
  if (l.per_key) parts.push("per key");
  return parts.join(" · ") || "no terms";
}

function keys(detail) {
  if (!detail) return h("span", { class: "muted" }, "—");
  const rows = detail.keys || [];
  if (rows.length === 0) return h("span", { class: "muted" }, "idle");
  const more = Number(detail.key_count || 0) - rows.length;
  return h("ul", { class: "keys" },
    rows.map((k) => h("li", { dataset: { key: k.key } },
      h("span", { class: "mono" }, k.key || "(whole limit)"), `: ${num(k.in_use)} in use, ${num(k.waiting)} waiting`)),
    more > 0 ? h("li", { class: "muted" }, `and ${num(more)} more keys`) : "");
}

function named(data) {
  return h("table", { id: "limits", "aria-label": "Named limits" },
    h("thead", {}, h("tr", {}, ["Name", "Terms", "Busiest keys"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, data.limits.map((l) => h("tr", { dataset: { limit: l.name } },
      h("th", { scope: "row" }, h("span", { class: "mono" }, l.name)),
      h("td", { dataset: { role: "terms" } }, terms(l)),
      h("td", { dataset: { role: "keys" } }, keys(data.details[l.name]))))));
}

export function mount(container, ctx) {
  const inUse = h("div", { id: "limits-in-use" });
  const declared = h("div", { id: "limits-named" });
  container.append(h("h2", { id: "limits-title" }, "Limits"), inUse, h("h3", {}, "Named limits"), declared);

  function drawTotals() {
    const resource = ctx.res.status;
    if (resource.data === undefined) {
      replace(inUse, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const list = resource.data.limits || [];
    replace(inUse, list.length === 0
      ? h("p", { class: "muted", id: "limits-quiet" }, "No limit has work in it or waiting on it now.")
      : totals(list));
  }

  function drawNamed() {
    const resource = ctx.res.limits;
    if (resource.data === undefined) {
      replace(declared, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    replace(declared, resource.data.limits.length === 0
      ? h("p", { class: "muted", id: "limits-none" },
        "No named limits: flux limit create NAME --concurrency N (or --rate 600/m) makes one that workflows share.")
      : named(resource.data));
  }

  const offs = [ctx.res.status.subscribe(drawTotals), ctx.res.limits.subscribe(drawNamed)];
  drawTotals();
  drawNamed();
  ctx.live.show(["status", "limits"]);
  return () => offs.forEach((off) => off());
}
