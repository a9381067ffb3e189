// The live feeds: the fleet's (GET /events) and one execution's
// (GET /executions/{id}/events). The page never trusts an event's payload for
// its state: an event only says "something changed" (its name hints at what),
// and the page re-reads the REST routes. So this file is the only place that
// knows how a feed is reached, and the rest works the same with no feed at all
// (the page then polls).
//
// Ways in, in order:
//  1. GET the feed with the Authorization header, read with fetch() as a
//     stream: any event name is seen, and the token stays in a header.
//  2. When the header is refused, a short-lived single-use ticket minted with
//     the token (POST /tickets {"scope": "fleet"}) and EventSource on
//     /events?ticket=..., since EventSource cannot send headers. A ticket is
//     not the token, and it is spent on first use.
//  3. The route does not exist (404): "unavailable"; tried again later.

import { ApiError, headers, post, url } from "./api.js";

// Names EventSource must subscribe to one by one (fetch() sees every name anyway).
const KNOWN_EVENTS = [
  "workers", "worker_connected", "worker_disconnected", "worker_reported", "worker_draining",
  "worker_paused", "worker_resumed", "execution_queued", "execution_dispatched", "execution_finished",
  "execution",
];
const QUIET = new Set(["ping", "connected", "hello"]);
const RETRY_UNAVAILABLE_MS = 30000;

// Split an SSE byte stream into events (the WHATWG parsing rules, less retry:).
export function sseParser(onEvent) {
  let buffer = "";
  let name = "";
  let data = [];
  return (chunk) => {
    buffer += chunk;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === "") {
        if (data.length || name) onEvent(name || "message", data.join("\n"));
        name = "";
        data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = value;
        else if (field === "data") data.push(value);
      }
    }
  };
}

// onEvent(name, data) for every event but keep-alives; onState(state) with
// "connecting", "live", "disconnected" or "unavailable". Returns { close() }.
export function openFleetStream(handlers) {
  return openStream("/events", { scope: "fleet" }, handlers);
}

// One execution's changes; the caller closes it once the execution is final
// (the feed ends there, and would otherwise be opened again).
export function openExecutionStream(id, handlers) {
  return openStream(`/executions/${encodeURIComponent(id)}/events`, { scope: "execution", execution_id: id }, handlers);
}

function openStream(path, scope, { onEvent, onState = () => {} }) {
  let closed = false;
  let timer = null;
  let failures = 0;
  let controller = null;
  let source = null;

  const deliver = (name, data) => {
    if (!QUIET.has(name)) onEvent(name, data);
  };

  const again = (state, delay) => {
    if (closed) return;
    onState(state);
    clearTimeout(timer);
    timer = setTimeout(connect, delay);
  };

  const retryLater = () => again("disconnected", Math.min(15000, 1000 * 2 ** failures++));

  async function viaTicket() {
    let minted;
    try {
      minted = await post("/tickets", scope);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 404 || error.status === 405)) return false;
      throw error;
    }
    source = new EventSource(url(path, { ticket: minted.ticket }));
    source.onopen = () => {
      failures = 0;
      onState("live");
    };
    source.onerror = () => {
      // A ticket is single-use: reconnecting needs a new one, so never let EventSource retry.
      source.close();
      source = null;
      retryLater();
    };
    source.onmessage = (event) => deliver("message", event.data);
    for (const name of KNOWN_EVENTS) source.addEventListener(name, (event) => deliver(name, event.data));
    return true;
  }

  async function connect() {
    if (closed) return;
    onState("connecting");
    controller = new AbortController();
    let response;
    try {
      response = await fetch(url(path), {
        headers: headers({ Accept: "text/event-stream" }),
        signal: controller.signal,
        cache: "no-store",
        credentials: "omit",
      });
    } catch (error) {
      if (!closed) retryLater();
      return;
    }
    if (response.status === 404 || response.status === 405) {
      again("unavailable", RETRY_UNAVAILABLE_MS);
      return;
    }
    if (response.status === 401 || response.status === 403) {
      try {
        if (!(await viaTicket())) again("unavailable", RETRY_UNAVAILABLE_MS);
      } catch {
        retryLater();
      }
      return;
    }
    const type = response.headers.get("content-type") || "";
    if (!response.ok || !type.startsWith("text/event-stream") || !response.body) {
      response.body?.cancel();
      retryLater();
      return;
    }
    failures = 0;
    onState("live");
    const parse = sseParser(deliver);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parse(value);
      }
    } catch {
      // the connection dropped, or close() aborted it
    }
    if (!closed) retryLater();
  }

  connect();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      controller?.abort();
      source?.close();
    },
  };
}
