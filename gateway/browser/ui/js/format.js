// Numbers as people read them. The API writes 64-bit integers as strings, and
// may write quantities as "8Gi"; both are accepted.

const UNITS = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50,
  k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15 };

export function num(value) {
  if (value === undefined || value === null || value === "") return 0;
  if (typeof value === "number") return value;
  const match = /^\s*([0-9.]+)\s*([KkMGTP]i?)?\s*$/.exec(String(value));
  if (!match) return Number(value) || 0;
  return Number(match[1]) * (match[2] ? UNITS[match[2]] : 1);
}

export function bytes(value) {
  let n = num(value);
  for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (Math.abs(n) < 1024 || unit === "TiB") {
      return `${n >= 10 || unit === "B" ? Math.round(n) : n.toFixed(1)} ${unit}`;
    }
    n /= 1024;
  }
  return `${n} B`;
}

export function duration(ms) {
  let s = Math.max(0, Math.round(num(ms) / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  s %= 60;
  if (m < 60) return `${m}m ${s}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function time(ms) {
  const n = num(ms);
  if (!n) return "—";
  return new Date(n).toLocaleString(undefined, { hour12: false });
}

export function ago(ms, now = Date.now()) {
  const n = num(ms);
  return n ? `${duration(now - n)} ago` : "—";
}

export const STATES = ["CREATED", "SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"];
export const FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);

export function state(value) {
  return String(value || "").replace(/^EXECUTION_STATE_/, "") || "UNSPECIFIED";
}

export function labels(map) {
  return Object.entries(map || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`);
}

// One line for what a requirement shape (or workflow) asks for.
export function requests(req, affinity) {
  const parts = [];
  const r = req || {};
  if (num(r.cpu)) parts.push(`${num(r.cpu)} cpu`);
  if (num(r.memory)) parts.push(`${bytes(r.memory)} memory`);
  if (num(r.gpu)) parts.push(`${num(r.gpu)} gpu`);
  if (num(r.gpu_memory)) parts.push(`${bytes(r.gpu_memory)}/gpu`);
  if (num(r.disk)) parts.push(`${bytes(r.disk)} disk`);
  for (const p of r.packages || []) parts.push(p);
  for (const l of labels(affinity)) parts.push(l);
  return parts.length ? parts.join(", ") : "runs anywhere";
}
