// Schedules: the tenant's schedules with their next and last ticks, read from
// GET /schedules (the signed-in token's tenant). A tick's run is an execution,
// so the fleet feed's execution events re-read this view as ticks fire.

import { h, replace } from "./dom.js";
import { time } from "./format.js";

// A tick (seconds since the epoch, 0 or absent when there is none) as the page shows times.
function tick(seconds) {
  return seconds ? time(seconds * 1000) : "–";
}

function until(seconds, now = Date.now()) {
  if (!seconds) return "";
  const s = Math.round(seconds - now / 1000);
  return s <= 0 ? " (due)" : ` (in ${s} s)`;
}

function when(s) {
  if (s.cron) return `cron ${s.cron}${s.timezone && s.timezone !== "UTC" ? ` (${s.timezone})` : ""}`;
  return `every ${s.every}`;
}

function row(s) {
  const paused = s.paused === true;
  return h("tr", { dataset: { schedule: s.name, paused: paused ? "true" : "false" } },
    h("th", { scope: "row" }, h("span", { class: "mono" }, s.name)),
    h("td", { class: "mono" }, s.workflow),
    h("td", { class: "mono", dataset: { role: "when" } }, when(s)),
    h("td", {}, s.overlap || "skip"),
    h("td", { dataset: { role: "next" } }, paused ? "paused" : `${tick(s.next_tick)}${until(s.next_tick)}`),
    h("td", { dataset: { role: "last" } }, tick(s.last_tick)));
}

export function mount(container, ctx) {
  const body = h("div", { id: "schedules-body" });
  container.append(h("h2", { id: "schedules-title" }, "Schedules"), body);

  function draw() {
    const resource = ctx.res.schedules;
    if (resource.data === undefined) {
      replace(body, h("p", { class: "muted" }, resource.error ? resource.error.message : "Loading…"));
      return;
    }
    const list = resource.data.schedules || [];
    if (list.length === 0) {
      replace(body, h("p", { class: "muted", id: "schedules-empty" },
        "No schedules yet: flux schedule create NAME --workflow WF --cron \"*/5 * * * *\" makes one."));
      return;
    }
    replace(body, h("table", { id: "schedules", "aria-label": "Schedules" },
      h("thead", {}, h("tr", {}, ["Schedule", "Workflow", "When", "Overlap", "Next tick", "Last tick"]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, list.map(row))));
  }

  const off = ctx.res.schedules.subscribe(draw);
  draw();
  ctx.live.show(["schedules"]);
  return off;
}
