// Keeping the page's data fresh. Every piece of state is a Resource re-read
// from a REST route; a fleet event (or, without a feed, a poll tick) only marks
// resources stale. Refreshes are debounced and never overlap, so a burst of
// thousands of events costs a few reads, not thousands.

import { openFleetStream } from "./stream.js";

export const POLL_MS = 2000;
const DEBOUNCE_MS = 150;

export class Resource {
  constructor(name, load) {
    this.name = name;
    this.load = load;
    this.data = undefined;
    this.error = null;
    this.loadedAt = 0;
    this.running = false;
    this.stale = false;
    this.listeners = new Set();
  }

  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // Re-read now, or once more right after the read in flight (never two at once).
  async refresh() {
    if (this.running) {
      this.stale = true;
      return;
    }
    this.running = true;
    try {
      do {
        this.stale = false;
        try {
          this.data = await this.load();
          this.error = null;
          this.loadedAt = Date.now();
        } catch (error) {
          this.error = error;
        }
        for (const listener of this.listeners) listener(this);
      } while (this.stale);
    } finally {
      this.running = false;
    }
  }
}

// Which resources an event's name may have changed; an unknown name changes everything.
function touched(name) {
  if (/^worker/.test(name)) return ["workers", "status"];
  // A schedule's tick is an execution submitted: the schedules' last ticks moved.
  if (/^execution/.test(name)) return ["workers", "status", "executions", "pending", "detail", "limits", "schedules"];
  return null;
}

export class Live {
  constructor({ onFeed }) {
    this.resources = new Map();
    this.active = new Set();
    // Read on every view (the header's figures).
    this.always = [];
    this.dirty = new Set();
    this.timer = null;
    this.poller = null;
    this.onFeed = onFeed;
    this.stream = null;
  }

  add(resource) {
    this.resources.set(resource.name, resource);
    return resource;
  }

  // The resources the visible view reads; only these are re-read on a change.
  show(names) {
    this.active = new Set([...this.always, ...names]);
    for (const name of this.active) this.resources.get(name).refresh();
  }

  invalidate(names) {
    for (const name of names || this.resources.keys()) this.dirty.add(name);
    if (this.timer === null) this.timer = setTimeout(() => this.flush(), DEBOUNCE_MS);
  }

  flush() {
    this.timer = null;
    for (const name of this.dirty) {
      if (this.active.has(name)) this.resources.get(name).refresh();
    }
    this.dirty.clear();
  }

  start() {
    this.stop();
    this.stream = openFleetStream({
      onEvent: (name) => this.invalidate(touched(name)),
      onState: (state) => {
        this.onFeed(state);
        // Without a live feed the page polls; on (re)connecting it re-reads what it may have missed.
        if (state === "live") {
          this.stopPolling();
          this.invalidate();
        } else if (state !== "connecting") {
          this.startPolling();
        }
      },
    });
  }

  startPolling() {
    if (this.poller !== null) return;
    this.poller = setInterval(() => {
      if (!document.hidden) this.invalidate();
    }, POLL_MS);
  }

  stopPolling() {
    clearInterval(this.poller);
    this.poller = null;
  }

  stop() {
    this.stream?.close();
    this.stream = null;
    this.stopPolling();
  }
}
