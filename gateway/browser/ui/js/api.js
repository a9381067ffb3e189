// The API token and every call the page makes. The token lives in this tab's
// sessionStorage (gone when the tab closes) and travels only in the
// Authorization header, never in a URL.

const KEY = "flux.dashboard.token";

// The page is served at <base>/ui/, the API at <base>/: resolving against the
// page keeps it working behind a proxy that mounts the gateway under a prefix.
export const BASE = new URL("../", document.baseURI);

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  get unauthenticated() {
    return this.status === 401 || this.code === "UNAUTHENTICATED";
  }
}

export function url(path, params) {
  const target = new URL(path.replace(/^\//, ""), BASE);
  for (const [name, value] of Object.entries(params || {})) {
    for (const one of [].concat(value)) {
      if (one !== "" && one !== undefined && one !== null) target.searchParams.append(name, one);
    }
  }
  return target;
}

export function headers(extra) {
  const all = { Accept: "application/json", ...(extra || {}) };
  const value = token();
  if (value) all.Authorization = `Bearer ${value}`;
  return all;
}

export async function call(method, path, options) {
  return (await exchange(method, path, options)).data;
}

// The answer's JSON and its headers (GET /status says whose token this is in X-Flux-Tenant and X-Flux-Role).
async function exchange(method, path, { params, body, signal } = {}) {
  let response;
  try {
    response = await fetch(url(path, params), {
      method,
      headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "UNAVAILABLE", `the gateway did not answer (${error.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const detail = data && data.error ? data.error : {};
    throw new ApiError(
      response.status,
      detail.code || String(response.status),
      detail.message || `${method} ${path} answered ${response.status}`,
    );
  }
  return { data, headers: response.headers };
}

// GET /status with who the page is signed in as ({tenant, role}; empty from a gateway without the headers).
async function status(signal) {
  const { data, headers } = await exchange("GET", "/status", { signal });
  return { ...data, caller: { tenant: headers.get("X-Flux-Tenant") || "", role: headers.get("X-Flux-Role") || "" } };
}

export const get = (path, params, signal) => call("GET", path, { params, signal });
export const post = (path, body) => call("POST", path, { body: body === undefined ? {} : body });

// The routes the page reads, in one place so a renamed route is one edit.
export const api = {
  status,
  workers: (signal) => get("/workers", undefined, signal),
  workflows: (signal) => get("/workflows", undefined, signal),
  schedules: (signal) => get("/schedules", undefined, signal),
  executions: (filters, signal) => get("/executions", filters, signal),
  execution: (id, signal) => get(`/executions/${encodeURIComponent(id)}`, undefined, signal),
  explain: (id, signal) => get(`/executions/${encodeURIComponent(id)}/explain`, undefined, signal),
  batch: (id, signal) => get(`/batches/${encodeURIComponent(id)}`, undefined, signal),
  cancel: (id) => post(`/executions/${encodeURIComponent(id)}/cancel`),
  limits: (signal) => get("/limits", undefined, signal),
  limit: (name, top, signal) => get(`/limits/${encodeURIComponent(name)}`, { top }, signal),
  pause: (name) => post(`/workers/${encodeURIComponent(name)}/pause`),
  resume: (name) => post(`/workers/${encodeURIComponent(name)}/resume`),
};
