// The shell: sign-in, routing between views (in the URL's hash, so views can
// be bookmarked; the token never is), the header, and actions.

import { api, setToken, token } from "./api.js";
import { h, replace } from "./dom.js";
import * as detail from "./detail.js";
import * as executions from "./executions.js";
import * as fleet from "./fleet.js";
import * as limits from "./limits.js";
import { Live, POLL_MS, Resource } from "./live.js";
import * as queue from "./queue.js";
import * as schedules from "./schedules.js";
import * as tenants from "./tenants.js";

const $ = (id) => document.getElementById(id);
const VIEWS = { fleet, queue, executions, tenants, limits, schedules };

const route = { view: "fleet", id: "", params: new URLSearchParams() };

const live = new Live({ onFeed: showFeed });
const res = {
  status: live.add(new Resource("status", (signal) => api.status(signal))),
  workers: live.add(new Resource("workers", (signal) => api.workers(signal))),
  workflows: live.add(new Resource("workflows", (signal) => api.workflows(signal))),
  executions: live.add(new Resource("executions", () => api.executions(executions.filters(route.params)))),
  pending: live.add(new Resource("pending", () => api.executions({ state: "CREATED", limit: 25 }))),
  detail: live.add(new Resource("detail", () => detail.load(route.id))),
  limits: live.add(new Resource("limits", (signal) => limits.load(signal))),
  schedules: live.add(new Resource("schedules", (signal) => api.schedules(signal))),
};

live.always = ["workers"];
let unmount = null;

const ctx = {
  live,
  res,
  route,
  navigate(hash) {
    if (location.hash === hash) onRoute();
    else location.hash = hash;
  },
  // Run an action (cancel, pause, resume); report a refusal; re-read everything it may have changed.
  async act(what, run) {
    try {
      const answer = await run();
      problem("");
      return answer;
    } catch (error) {
      if (error.unauthenticated) signOut("The API token was refused; sign in again.");
      else problem(`${what}: ${error.message}`);
      return null;
    } finally {
      live.invalidate();
    }
  },
};

// What the banner shows and why: a failed read clears itself once reads work
// again; a refused action stays until the next action, so it cannot be missed.
let problemFrom = "";

function problem(message, from = "action") {
  if (!message && from === "read" && problemFrom !== "read") return;
  problemFrom = message ? from : "";
  $("problem").textContent = message;
  $("problem").hidden = !message;
}

function showFeed(state) {
  const feed = $("feed");
  const words = {
    live: ["live", "Live: updates as the fleet changes"],
    connecting: ["polling", "Connecting to the live feed…"],
    unavailable: ["polling", `Refreshing every ${POLL_MS / 1000} s (no live feed here)`],
    disconnected: ["offline", `Live feed lost; refreshing every ${POLL_MS / 1000} s while it reconnects`],
  }[state] || ["polling", state];
  feed.dataset.state = words[0];
  feed.dataset.feed = state;
  feed.textContent = words[1];
}

function showSummary(resource) {
  if (resource.error) {
    if (resource.error.unauthenticated) signOut("The API token was refused; sign in again.");
    else problem(`Cannot read the fleet: ${resource.error.message}`, "read");
    return;
  }
  problem("", "read");
  // From GET /workers, which a replica answers for the whole fleet (its own workers and the others').
  const workers = resource.data.workers || [];
  const connected = workers.filter((w) => w.connected).length;
  const paused = workers.filter((w) => w.paused).length;
  const held = workers.reduce((sum, w) => sum + Number(w.active_executions || 0), 0);
  const slots = workers.reduce((sum, w) => sum + (w.connected ? Number(w.capacity || 0) : 0), 0);
  replace($("summary"),
    `${connected}/${workers.length} workers connected`, paused ? ` (${paused} paused)` : "",
    ` · ${held}/${slots} slots busy`);
}

// Which tenant and role the token has, from every status read (the Tenants and Queue views, and once at sign-in).
function showCaller(resource) {
  if (!resource.data) return;
  const who = tenants.caller(resource.data);
  const node = $("caller");
  node.hidden = !who.tenant;
  node.dataset.tenant = who.tenant;
  node.dataset.role = who.role;
  replace(node, "Signed in as tenant ", h("b", {}, who.tenant), ` · ${who.role} token`);
}

function onRoute() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "fleet").split("?");
  const [view, ...rest] = path.split("/");
  route.params = new URLSearchParams(query || "");
  if (view === "executions" && rest.length) {
    route.view = "detail";
    route.id = decodeURIComponent(rest.join("/"));
  } else {
    route.view = VIEWS[view] ? view : "fleet";
    route.id = "";
  }
  for (const link of document.querySelectorAll("nav a")) {
    const current = link.dataset.view === (route.view === "detail" ? "executions" : route.view);
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  unmount?.();
  const main = $("view");
  main.replaceChildren();
  const module = route.view === "detail" ? detail : VIEWS[route.view];
  unmount = module.mount(main, ctx);
  document.title = `Flux · ${route.view === "detail" ? `execution ${route.id}` : route.view}`;
}

function showApp() {
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("signout").hidden = false;
  live.start();
  onRoute();
  // The header's tenant: read once here, whatever the view (later status reads keep it current).
  if (!live.active.has("status")) res.status.refresh();
  $("view").focus();
}

function signOut(message) {
  setToken("");
  live.stop();
  unmount?.();
  unmount = null;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("summary").replaceChildren();
  $("caller").replaceChildren();
  $("caller").hidden = true;
  $("feed").textContent = "";
  problem("");
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("token").value = "";
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  setToken(value);
  const button = event.submitter;
  if (button) button.disabled = true;
  try {
    // Any authenticated read says whether the core takes the token; this one is small.
    await api.workflows();
    $("token").value = "";
    showApp();
  } catch (error) {
    setToken("");
    $("signin-error").textContent = error.unauthenticated
      ? "That token was refused: use the client API token (FLUX_API_TOKEN)."
      : `Cannot reach the gateway: ${error.message}`;
  } finally {
    if (button) button.disabled = false;
  }
}

res.workers.subscribe(showSummary);
res.status.subscribe(showCaller);
$("signin-form").addEventListener("submit", signIn);
$("signout").addEventListener("click", () => signOut(""));
window.addEventListener("hashchange", () => {
  if (token()) onRoute();
});
if (token()) showApp();
else {
  // A server started with --insecure takes calls without a token: no sign-in then.
  api.workflows().then(showApp, () => signOut(""));
}

