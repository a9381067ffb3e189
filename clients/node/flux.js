#!/usr/bin/env node
// A Flux worker and client in Node.js, to show that proto/flux/v1 is the whole
// contract: nothing here comes from the Python package. The .proto files are
// loaded at run time with @grpc/proto-loader, so there is no generated code to
// keep in step with proto/.
//
//   node flux.js worker NAME [--max-executions N] [--label k=v]... [--cpus N]
//                            [--memory 8Gi] [--disk 100Gi] [--capacity N]
//   node flux.js register FILE --name NAME [--entrypoint FN] [--cpu N] [--memory Q]
//                            [--gpu N] [--gpu-memory Q] [--disk Q] [--package REQ]... [--affinity k=v]...
//                            [--max-attempts N] [--runtime NAME]
//   node flux.js run NAME [INPUT_JSON] [--wait] [--timeout S]
//   node flux.js wait EXECUTION_ID... [--timeout S]
//   node flux.js explain EXECUTION_ID [--json]
//
// `run` prints the execution id; with --wait it runs and waits in one RunAndWait call and
// prints {"execution_id", "state", "worker", "attempt", "output", "error"} as one JSON
// line, exiting 1 unless COMPLETED. `wait` follows many executions in one WaitExecutions
// stream and prints one such line per execution as each finishes (completion order),
// exiting 1 unless all COMPLETED. Usage errors name the flag and exit 2.
//
// Every command takes --server HOST:PORT (else $FLUX_SERVER, else 127.0.0.1:50051).
// Tokens: $FLUX_WORKER_TOKEN for `worker`, $FLUX_API_TOKEN for the others, else
// ./.flux/worker.token or ./.flux/api.token as the Python CLI reads them. $FLUX_CA
// (a PEM file) switches to TLS.
//
// Tracing (W3C Trace Context, as the Python client and worker carry it): `run` sends
// the caller's context from $TRACEPARENT (and $TRACESTATE), the environment carrier
// OpenTelemetry specifies, so the execution joins the caller's trace. The worker
// continues each dispatch's context (ExecutionScheduled.trace): its Claim and Complete
// calls carry it, and its output has it as "trace" ({traceparent, tracestate}).
//
// A Node worker cannot run Python, so it advertises the runtime "node <version>"
// (never "python"): the server only dispatches workflows registered for the
// "node" runtime to it (`register --runtime node`). It does not fetch the
// workflow's code: it completes each execution with {"input": <input>,
// "worker": NAME, "workflow": <name>, "attempt": N, "runtime": "node"}. That is
// enough to take part in dispatch (claim, fencing generations, results) and to
// test it. `register` declares "python" unless --runtime says otherwise.

"use strict";

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { parseArgs } = require("node:util");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const PROTO_ROOT = path.resolve(__dirname, "../../proto");
const DEFAULT_SERVER = "127.0.0.1:50051";
const UNARY_TIMEOUT_MS = 30_000;
const FINAL_STATES = new Set([
  "EXECUTION_STATE_COMPLETED",
  "EXECUTION_STATE_FAILED",
  "EXECUTION_STATE_CANCELLED",
]);

class UsageError extends Error {}

// ------------------------------------------------------------------ wire

function loadServices() {
  const definition = protoLoader.loadSync(["flux/v1/worker.proto", "flux/v1/control.proto"], {
    includeDirs: [PROTO_ROOT],
    keepCase: true, // .proto field names, as the proto3 JSON mapping and the gateway use them
    longs: String, // int64 (bytes, generations) without losing precision
    enums: String,
    defaults: true,
    oneofs: true, // WorkerEvent.event names which member is set
  });
  const v1 = grpc.loadPackageDefinition(definition).flux.v1;
  return { WorkerService: v1.WorkerService, ControlService: v1.ControlService };
}

function channelCredentials() {
  const ca = process.env.FLUX_CA;
  return ca ? grpc.credentials.createSsl(fs.readFileSync(ca)) : grpc.credentials.createInsecure();
}

// Same order as flux/security/auth.py caller_token: environment, then ./.flux/<role>.token.
function token(role) {
  const env = role === "worker" ? "FLUX_WORKER_TOKEN" : "FLUX_API_TOKEN";
  if (process.env[env]) return process.env[env];
  const stored = path.join(".flux", `${role}.token`);
  if (fs.existsSync(stored)) return fs.readFileSync(stored, "utf8").trim();
  throw new UsageError(`no ${role} token: set ${env} or run where ./.flux/${role}.token exists`);
}

function bearer(role) {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token(role)}`);
  return metadata;
}

// Promisified unary call with a deadline, so no call can hang the program.
function unary(stub, method, request, metadata, timeoutMs = UNARY_TIMEOUT_MS) {
  return new Promise((resolve, reject) => {
    stub[method](request, metadata, { deadline: Date.now() + timeoutMs }, (err, response) =>
      err ? reject(rpcError(method, err)) : resolve(response),
    );
  });
}

// W3C Trace Context: version-trace_id-parent_id-flags, lower-case hex, ids not all zero.
const TRACEPARENT = /^(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$/;

// The caller's trace context from the environment carrier; refused by name when malformed.
function callerTrace() {
  const traceparent = (process.env.TRACEPARENT || "").trim();
  if (!traceparent) return null;
  if (!TRACEPARENT.test(traceparent)) {
    throw new UsageError(
      `$TRACEPARENT must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>); got ${JSON.stringify(traceparent)}`,
    );
  }
  return { traceparent, tracestate: (process.env.TRACESTATE || "").trim() };
}

// ``metadata`` plus the trace context, when there is one (a copy: the original is shared).
function withTrace(metadata, trace) {
  if (!trace || !trace.traceparent) return metadata;
  const traced = metadata.clone();
  traced.set("traceparent", trace.traceparent);
  if (trace.tracestate) traced.set("tracestate", trace.tracestate);
  return traced;
}

function rpcError(method, err) {
  const code = Object.keys(grpc.status).find((k) => grpc.status[k] === err.code) || err.code;
  // grpc-js ends connection errors with "Resolution note: " even when it has no note: drop it then.
  const details = String(err.details || err.message).replace(/[.\s]*Resolution note:\s*$/, "");
  return new Error(`${method} failed: ${code}: ${details}`);
}

// ------------------------------------------------------------------ flags

function integer(flag, text, min = 0) {
  if (!/^[0-9]+$/.test(text) || Number(text) < min || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${flag} must be an integer >= ${min}; got ${JSON.stringify(text)}`);
  }
  return Number(text);
}

function seconds(flag, text) {
  const value = Number(text);
  if (text === "" || !Number.isFinite(value) || value <= 0) {
    throw new UsageError(`${flag} must be a number of seconds > 0; got ${JSON.stringify(text)}`);
  }
  return value;
}

const MULTIPLIERS = { "": 1n };
for (const [i, suffix] of ["k", "M", "G", "T", "P", "E"].entries()) {
  MULTIPLIERS[suffix] = 1000n ** BigInt(i + 1);
  MULTIPLIERS[`${suffix === "k" ? "K" : suffix}i`] = 1024n ** BigInt(i + 1);
}

// Bytes as a decimal string (int64 on the wire), with the same forms as
// flux/domain/quantity.py: int bytes, Ki..Ei (1024^n) or k..E (1000^n); fractions round up.
function bytes(flag, text) {
  const match = /^([0-9]+)(?:\.([0-9]+))?([A-Za-z]*)$/.exec(text);
  if (!match || !Object.hasOwn(MULTIPLIERS, match[3])) {
    throw new UsageError(
      `${flag} must be bytes or a quantity like 512Mi, 8Gi, 10G (Ki..Ei or k..E); ` +
        `got ${JSON.stringify(text)}`,
    );
  }
  const fraction = match[2] || "";
  const scale = 10n ** BigInt(fraction.length);
  const scaled = BigInt(match[1] + fraction) * MULTIPLIERS[match[3]];
  const value = (scaled + scale - 1n) / scale;
  if (value > 2n ** 63n - 1n) throw new UsageError(`${flag} ${text} does not fit in int64 bytes`);
  return value.toString();
}

function pairs(flag, values) {
  const out = {};
  for (const item of values || []) {
    const eq = item.indexOf("=");
    if (eq <= 0) throw new UsageError(`${flag} must be KEY=VALUE; got ${JSON.stringify(item)}`);
    out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}

// parseArgs already names an unknown or value-less flag; this adds which
// command was being parsed and how many positionals it takes.
function parse(command, args, options, positionals) {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: { server: { type: "string" }, ...options },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    throw new UsageError(`${command}: ${err.message}`);
  }
  const [min, max, names] = positionals;
  if (parsed.positionals.length < min || parsed.positionals.length > max) {
    throw new UsageError(`${command} takes ${names}; got ${JSON.stringify(parsed.positionals)}`);
  }
  const server = parsed.values.server || process.env.FLUX_SERVER || DEFAULT_SERVER;
  if (!/^[^\s:]+:[0-9]+$|^\[[0-9a-fA-F:.]+\]:[0-9]+$/.test(server)) {
    throw new UsageError(`--server must be HOST:PORT; got ${JSON.stringify(server)}`);
  }
  return { values: parsed.values, positionals: parsed.positionals, server };
}

// ------------------------------------------------------------------ worker

async function worker(args) {
  const { values, positionals, server } = parse(
    "worker",
    args,
    {
      label: { type: "string", multiple: true },
      cpus: { type: "string" },
      memory: { type: "string" },
      disk: { type: "string" },
      capacity: { type: "string" },
      "max-executions": { type: "string" },
    },
    [1, 1, "NAME"],
  );
  const name = positionals[0];
  const labels = pairs("--label", values.label);
  const max = values["max-executions"] ? integer("--max-executions", values["max-executions"], 1) : Infinity;
  const cpus = values.cpus ? integer("--cpus", values.cpus) : os.availableParallelism();
  const memory = values.memory ? bytes("--memory", values.memory) : String(os.totalmem());
  const disk = values.disk ? bytes("--disk", values.disk) : rootDiskBytes();
  // Declared, not observed: this worker reserves nothing of the machine for
  // itself, so what it offers is what it was told to offer. No GPUs, and no
  // Python distributions, so workflows that request either never match it.
  const resources = {
    cpu_total: cpus,
    cpu_available: cpus,
    memory_total: memory,
    memory_available: memory,
    disk_total: disk,
    disk_free: disk,
    gpus: [],
  };
  const metadata = bearer("worker");
  const { WorkerService } = loadServices();
  const stub = new WorkerService(server, channelCredentials(), {
    // Notice a dead server on an idle stream instead of waiting forever.
    "grpc.keepalive_time_ms": 20_000,
    "grpc.keepalive_timeout_ms": 10_000,
  });

  const registered = await unary(
    stub,
    "Register",
    {
      name,
      resources,
      // What it executes: workflows registered for the "node" runtime, not Python ones.
      software: { packages: [], marker_environment: {}, runtimes: [`node ${process.versions.node}`] },
      labels,
      capacity: values.capacity ? integer("--capacity", values.capacity, 1) : 0,
    },
    metadata,
  );
  const session = { name, session_token: registered.session_token };
  const call = stub.Connect(session, metadata);
  let done = 0; // executions completed
  let claimed = 0; // executions claimed (at most max)
  let stopping = false;
  const cancelled = new Set();

  const stop = () => {
    stopping = true;
    call.cancel(); // the server releases the stream; we hold nothing unfinished by then
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);

  // Claim, Complete and Release refusals (a stale generation, a cancel that
  // crossed the dispatch) mean the execution is no longer ours: log, go on.
  async function workerCall(method, request, trace = null) {
    try {
      await unary(stub, method, { ...session, ...request }, withTrace(metadata, trace));
      return true;
    } catch (err) {
      console.error(`flux-node worker ${name}: ${err.message}`);
      return false;
    }
  }

  async function onScheduled(ev) {
    const { execution_id, generation } = ev;
    if (claimed >= max) {
      // Dispatched before the server saw us draining: hand it back at once
      // rather than let it wait out the ack deadline.
      await workerCall("Release", { execution_id, generation, reason: "--max-executions reached" });
      return;
    }
    if (!(await workerCall("Claim", { execution_id, generation }, ev.trace))) return;
    claimed += 1;
    if (claimed >= max) {
      // Draining: the server sends nothing new, and this worker may leave once done.
      await unary(stub, "ReportResources", { ...session, resources, draining: true }, metadata);
    }
    // Cancelled while we claimed it: the server has already settled it.
    if (!cancelled.has(execution_id)) {
      const result = { execution_id, generation };
      try {
        result.output_json = JSON.stringify(echo(ev, name));
      } catch (err) {
        // Reported as the execution's error, the way a Python worker reports an exception.
        result.error = { type: err.name, message: err.message, traceback: err.stack };
      }
      if (await workerCall("Complete", result, ev.trace)) {
        done += 1;
        console.error(`flux-node worker ${name}: completed ${execution_id} (${done} done)`);
      }
    }
    if (claimed >= max) stop();
  }

  // Events are handled one at a time, in order: claims, the draining report
  // and releases never race each other, and the last one finishes before exit.
  let queue = Promise.resolve();
  let failure = null;
  const handle = (event) => {
    switch (event.event) {
      case "connected":
        console.error(`flux-node worker ${name}: connected to ${event.connected.server_id} at ${server}`);
        return Promise.resolve();
      case "execution_scheduled":
        return onScheduled(event.execution_scheduled);
      default: // ping: the stream is alive; nothing to answer (cancels are noted on arrival)
        return Promise.resolve();
    }
  };
  call.on("data", (event) => {
    // Noted at once, not in turn, so an execution being claimed right now sees it.
    if (event.event === "execution_cancelled") cancelled.add(event.execution_cancelled.execution_id);
    queue = queue.then(() => handle(event)).catch((err) => {
      failure = failure || err;
      stop();
    });
  });
  const ended = new Promise((resolve) => {
    call.on("error", (err) => resolve(stopping && err.code === grpc.status.CANCELLED ? null : err));
    call.on("end", () => resolve(stopping ? null : new Error("the server closed the dispatch stream")));
  });
  const streamError = await ended;
  await queue;
  stub.close();
  if (failure) throw failure;
  if (streamError) throw streamError.code === undefined ? streamError : rpcError("Connect", streamError);
}

// What this worker "runs" in place of the workflow's Python code.
function echo(ev, worker) {
  const output = {
    input: ev.input_json ? JSON.parse(ev.input_json) : null,
    worker,
    workflow: ev.workflow.name,
    attempt: ev.attempt,
    runtime: "node",
  };
  // The dispatch's context, continued: what a workflow here would open its spans under.
  if (ev.trace && ev.trace.traceparent) output.trace = ev.trace;
  return output;
}

function rootDiskBytes() {
  const stats = fs.statfsSync("/");
  return (BigInt(stats.bavail) * BigInt(stats.bsize)).toString();
}

// ------------------------------------------------------------------ client

function control(server) {
  const { ControlService } = loadServices();
  return new ControlService(server, channelCredentials());
}

async function register(args) {
  const { values, positionals, server } = parse(
    "register",
    args,
    {
      name: { type: "string" },
      entrypoint: { type: "string" },
      cpu: { type: "string" },
      memory: { type: "string" },
      gpu: { type: "string" },
      "gpu-memory": { type: "string" },
      disk: { type: "string" },
      package: { type: "string", multiple: true },
      affinity: { type: "string", multiple: true },
      "max-attempts": { type: "string" },
      runtime: { type: "string" },
    },
    [1, 1, "FILE"],
  );
  // The Python CLI reads @workflow options from the file's syntax tree; Node does
  // not parse Python, so the same WorkflowMetadata comes from flags. The server
  // validates it as sent.
  if (!values.name) throw new UsageError("register needs --name, the workflow's registered name");
  const requests = {
    cpu: values.cpu ? integer("--cpu", values.cpu) : 0,
    memory: values.memory ? bytes("--memory", values.memory) : "0",
    gpu: values.gpu ? integer("--gpu", values.gpu) : 0,
    gpu_memory: values["gpu-memory"] ? bytes("--gpu-memory", values["gpu-memory"]) : "0",
    disk: values.disk ? bytes("--disk", values.disk) : "0",
    packages: values.package || [],
  };
  const metadata = {
    name: values.name,
    entrypoint: values.entrypoint || values.name,
    requests,
    affinity: pairs("--affinity", values.affinity),
    max_attempts: values["max-attempts"] ? integer("--max-attempts", values["max-attempts"], 1) : 0,
    runtime: runtimeName(values.runtime),
  };
  const file = positionals[0];
  let source;
  try {
    source = fs.readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`FILE ${JSON.stringify(file)} cannot be read: ${err.code || err.message}`);
  }
  const stub = control(server);
  try {
    const response = await unary(
      stub,
      "RegisterWorkflow",
      { filename: path.basename(file), source, workflows: [metadata] },
      bearer("api"),
    );
    for (const wf of response.workflows) {
      // Registering the same source and options again returns the same version.
      const verb = wf.unchanged ? "unchanged" : "registered";
      console.log(`${verb} ${wf.name} v${wf.version} (${wf.source_hash.slice(0, 12)})`);
    }
  } finally {
    stub.close();
  }
}

// The runtime a registered workflow needs; the server refuses other forms too, but
// a usage error here names the flag.
function runtimeName(value) {
  if (value === undefined) return "python";
  if (!/^[a-z][a-z0-9_.+-]{0,31}$/.test(value)) {
    throw new UsageError(`--runtime must be a runtime name such as python or node; got ${JSON.stringify(value)}`);
  }
  return value;
}

function summary(execution) {
  return {
    execution_id: execution.execution_id,
    state: execution.state.replace("EXECUTION_STATE_", ""),
    worker: execution.worker,
    attempt: execution.attempt,
    output: execution.output_json ? JSON.parse(execution.output_json) : null,
    error: execution.error && execution.error.type ? execution.error : null,
  };
}

// Reads a server stream of executions to its end, handing each to onExecution; resolves with how
// many came. A deadline past means the wait ran out (the executions go on).
function readExecutions(stub, method, request, metadata, timeoutMs, onExecution) {
  return new Promise((resolve, reject) => {
    let count = 0;
    const call = stub[method](request, metadata, { deadline: Date.now() + timeoutMs });
    call.on("data", (execution) => {
      count += 1;
      onExecution(execution);
    });
    call.on("error", (err) => {
      if (err.code === grpc.status.DEADLINE_EXCEEDED) {
        reject(new Error(`not finished within ${timeoutMs / 1000}s (the executions go on)`));
      } else {
        reject(rpcError(method, err));
      }
    });
    call.on("end", () => resolve(count));
  });
}

async function run(args) {
  const { values, positionals, server } = parse(
    "run",
    args,
    { wait: { type: "boolean" }, timeout: { type: "string" } },
    [1, 2, "NAME [INPUT_JSON]"],
  );
  const [name, input = "null"] = positionals;
  try {
    JSON.parse(input);
  } catch (err) {
    throw new UsageError(`INPUT_JSON is not JSON: ${err.message}`);
  }
  const timeoutMs = values.timeout ? seconds("--timeout", values.timeout) * 1000 : 24 * 3600 * 1000;
  const trace = callerTrace();
  // The caller's context goes with the submission (RunWorkflow or RunAndWait).
  const metadata = withTrace(bearer("api"), trace);
  const stub = control(server);
  const request = { workflow_name: name, input_json: input };
  try {
    if (!values.wait) {
      const execution = await unary(stub, "RunWorkflow", request, metadata);
      console.log(execution.execution_id);
      return 0;
    }
    // One call: the execution as accepted, then its final state.
    let last = null;
    await readExecutions(stub, "RunAndWait", { run: request }, metadata, timeoutMs, (e) => {
      last = e;
    });
    if (!last || !FINAL_STATES.has(last.state)) throw new Error("RunAndWait ended before a final state");
    const final = summary(last);
    console.log(JSON.stringify(final));
    return final.state === "COMPLETED" ? 0 : 1;
  } finally {
    stub.close();
  }
}

async function wait(args) {
  const { values, positionals, server } = parse("wait", args, { timeout: { type: "string" } }, [
    1,
    Infinity,
    "EXECUTION_ID...",
  ]);
  const timeoutMs = values.timeout ? seconds("--timeout", values.timeout) * 1000 : 24 * 3600 * 1000;
  const stub = control(server);
  let failed = 0;
  try {
    // One WaitExecutions stream: each final state as it comes, in completion order.
    const request = { execution_ids: positionals };
    await readExecutions(stub, "WaitExecutions", request, bearer("api"), timeoutMs, (batch) => {
      for (const execution of batch.executions) {
        const final = summary(execution);
        if (final.state !== "COMPLETED") failed += 1;
        console.log(JSON.stringify(final));
      }
    });
  } finally {
    stub.close();
  }
  return failed ? 1 : 0;
}

async function explain(args) {
  const { values, positionals, server } = parse("explain", args, { json: { type: "boolean" } }, [
    1,
    1,
    "EXECUTION_ID",
  ]);
  const stub = control(server);
  try {
    const request = { execution_id: positionals[0] };
    const explanation = await unary(stub, "ExplainExecution", request, bearer("api"));
    console.log(values.json ? JSON.stringify(explanation) : explanation.summary);
  } finally {
    stub.close();
  }
}

// ------------------------------------------------------------------ tenants (HTTP)
//
// Tenant administration over the gateway's HTTP API, mirroring the Python client's
// `client.tenants` (flux/client/tenant_admin.py). Every call needs an admin API token.
//
//   const { FluxClient } = require("./flux.js");
//   const client = new FluxClient({ gateway: "http://127.0.0.1:8080" });  // token: $FLUX_API_TOKEN
//   await client.tenants.create("ml", { gpu: 4, memory: "64Gi", cohort: "research" });
//   const token = await client.tenants.createToken("ml", "read");
//
// Terms are the fields of a tenants file (cpu, memory, gpu, gpu_memory, cohort,
// borrowing_limit, lending_limit, weight), as `flux tenant apply` reads them; tenants
// come back in the same form ({name, gpu: 4, memory: "64Gi", cohort, weight: 1}).
// Quantities are converted here, since the wire carries bytes; everything else is
// the server's to check. A refusal is a FluxError: "PATCH /tenants/ml failed:
// INVALID_ARGUMENT: gpu must be a whole number >= 0; got 'four'", the server's message
// naming the field, with .status (HTTP), .code (INVALID_ARGUMENT, NOT_FOUND, ...) and
// .details (the server's message alone); one refused here, before sending, has status 0.

const DEFAULT_GATEWAY = "http://127.0.0.1:8080";
const TENANT_RESOURCES = ["cpu", "memory", "gpu", "gpu_memory"];
const COUNTED = new Set(["cpu", "gpu"]);
const TENANT_FIELDS = [...TENANT_RESOURCES, "cohort", "borrowing_limit", "lending_limit", "weight"];
const FIELD_LIST = `name, ${TENANT_FIELDS.join(", ")}`;

class FluxError extends Error {
  constructor(message, { status = 0, code = "", details = message } = {}) {
    super(message);
    this.name = "FluxError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

// Refused before anything is sent (status 0), worded as the server words it (flux/domain/tenant.py).
function invalid(details) {
  return new FluxError(details, { code: "INVALID_ARGUMENT", details });
}

// One quota amount on the wire: a count as is, bytes as a decimal string; null/undefined: no limit.
function amount(field, value) {
  if (value === null || value === undefined) return undefined;
  const resource = field.split(".").pop();
  if (COUNTED.has(resource)) {
    const text = typeof value === "number" ? String(value) : typeof value === "string" ? value.trim() : null;
    if (text === null || !/^[0-9]+$/.test(text)) {
      throw invalid(`${field} must be a whole number >= 0; got ${JSON.stringify(value)}`);
    }
    return text;
  }
  try {
    return bytes(field, typeof value === "number" ? String(value) : String(value).trim());
  } catch (err) {
    throw invalid(err.message);
  }
}

function limits(field, value) {
  if (value === null || value === undefined) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw invalid(`${field} must be a mapping of resource to amount, e.g. {gpu: 2, memory: '8Gi'}`);
  }
  const out = {};
  for (const [resource, given] of Object.entries(value)) {
    if (!TENANT_RESOURCES.includes(resource)) {
      throw invalid(`${field}: unknown resource ${JSON.stringify(resource)}; use ${TENANT_RESOURCES.join(", ")}`);
    }
    const wire = amount(`${field}.${resource}`, given);
    if (wire !== undefined) out[resource] = wire;
  }
  return out;
}

// A tenant in the tenants-file form -> flux.v1.Tenant as JSON (what POST and PUT /tenants take);
// `where` names it in a refusal ("tenants[1]: ").
function tenantToWire(name, terms, where = "") {
  try {
    return wireTenant(name, terms);
  } catch (err) {
    throw err instanceof FluxError && where ? invalid(`${where}${err.details}`) : err;
  }
}

function wireTenant(name, terms) {
  if (terms === null || typeof terms !== "object" || Array.isArray(terms)) {
    throw invalid(`the terms must be an object of tenant fields (${FIELD_LIST})`);
  }
  for (const key of Object.keys(terms)) {
    if (!TENANT_FIELDS.includes(key)) {
      throw invalid(`unknown tenant field ${JSON.stringify(key)}; the fields are ${FIELD_LIST}`);
    }
  }
  const quota = {};
  for (const resource of TENANT_RESOURCES) {
    const wire = amount(resource, terms[resource]);
    if (wire !== undefined) quota[resource] = wire;
  }
  const tenant = {
    name,
    quota,
    borrowing_limit: limits("borrowing_limit", terms.borrowing_limit),
    lending_limit: limits("lending_limit", terms.lending_limit),
  };
  if (terms.cohort !== undefined && terms.cohort !== null) tenant.cohort = terms.cohort;
  if (terms.weight !== undefined && terms.weight !== null) {
    // Checked here: 0 on the wire means "the default, 1", so a weight of 0 would pass unnoticed.
    const weight = typeof terms.weight === "string" && terms.weight.trim() ? Number(terms.weight) : terms.weight;
    if (typeof weight !== "number" || !Number.isFinite(weight) || weight <= 0) {
      throw invalid(`weight must be a number > 0 (default 1); got ${JSON.stringify(terms.weight)}`);
    }
    tenant.weight = weight;
  }
  return tenant;
}

// Bytes as the exact quantity a person wrote ("8Gi"), where one exists; counts as numbers.
function showAmount(resource, wire) {
  if (COUNTED.has(resource)) return Number(wire);
  const value = BigInt(wire);
  for (const [suffix, power] of [["Pi", 5n], ["Ti", 4n], ["Gi", 3n], ["Mi", 2n], ["Ki", 1n]]) {
    const size = 1024n ** power;
    if (value && value % size === 0n) return `${value / size}${suffix}`;
  }
  return value.toString();
}

function limitsFromWire(message) {
  const out = {};
  for (const resource of TENANT_RESOURCES) {
    if (message && message[resource] !== undefined) out[resource] = showAmount(resource, message[resource]);
  }
  return out;
}

// flux.v1.Tenant as JSON -> the tenants-file form, as the Python Tenant.to_dict() gives it.
function tenantFromWire(message) {
  const out = { name: message.name, ...limitsFromWire(message.quota) };
  if (message.cohort) out.cohort = message.cohort;
  const borrowing = limitsFromWire(message.borrowing_limit);
  if (Object.keys(borrowing).length) out.borrowing_limit = borrowing;
  const lending = limitsFromWire(message.lending_limit);
  if (Object.keys(lending).length) out.lending_limit = lending;
  out.weight = message.weight || 1;
  return out;
}

function tenantPath(name) {
  if (typeof name !== "string" || !name) throw invalid(`a tenant name must be a non-empty string; got ${JSON.stringify(name)}`);
  return `/tenants/${encodeURIComponent(name)}`;
}

class TenantAdmin {
  constructor(client) {
    this._client = client;
  }

  async create(name, terms = {}) {
    const answer = await this._client.request("POST", "/tenants", tenantToWire(name, terms));
    return tenantFromWire(answer.tenant);
  }

  async list() {
    return (await this._client.request("GET", "/tenants")).tenants.map(tenantFromWire);
  }

  async get(name) {
    return tenantFromWire((await this._client.request("GET", tenantPath(name))).tenant);
  }

  // Some terms changed, in the tenants-file form; null clears one. The server checks them.
  async set(name, changes) {
    return tenantFromWire((await this._client.request("PATCH", tenantPath(name), changes)).tenant);
  }

  async delete(name) {
    await this._client.request("DELETE", tenantPath(name));
  }

  // Create or replace each tenant ({name, ...terms}) by name, all of them or none.
  async apply(tenants) {
    if (!Array.isArray(tenants)) throw invalid("apply takes an array of tenants ({name, ...terms})");
    const wire = tenants.map((tenant, index) => {
      if (tenant === null || typeof tenant !== "object") throw invalid(`tenants[${index}] must be an object`);
      const { name, ...terms } = tenant;
      return tenantToWire(name, terms, `tenants[${index}]: `);
    });
    return (await this._client.request("PUT", "/tenants", { tenants: wire })).tenants.map(tenantFromWire);
  }

  // A new API token for `tenant` ("submit", "read" or "admin"); the server keeps only its digest.
  async createToken(tenant, role = "submit") {
    return (await this._client.request("POST", "/tokens", { tenant, role })).token;
  }
}

class FluxClient {
  // gateway: the HTTP gateway's URL (else $FLUX_GATEWAY, else http://127.0.0.1:8080);
  // token: an API token (else $FLUX_API_TOKEN, else ./.flux/api.token, read at the first call).
  constructor({ gateway, token: apiToken, timeoutMs = UNARY_TIMEOUT_MS } = {}) {
    this.gateway = new URL(gateway || process.env.FLUX_GATEWAY || DEFAULT_GATEWAY);
    this._token = apiToken;
    this.timeoutMs = timeoutMs;
    this.tenants = new TenantAdmin(this);
  }

  // One call; its JSON answer, or a FluxError carrying the gateway's {"error": {code, message}}.
  async request(method, route, body) {
    const headers = { Accept: "application/json", Authorization: `Bearer ${this._token || token("api")}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const target = new URL(route.replace(/^\//, ""), this.gateway.href.endsWith("/") ? this.gateway : `${this.gateway.href}/`);
    let response;
    try {
      response = await fetch(target, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      const why = err.name === "TimeoutError" ? `no answer within ${this.timeoutMs / 1000}s` : (err.cause || err).message;
      throw new FluxError(`${method} ${route} failed: UNAVAILABLE: the gateway at ${this.gateway.origin} did not answer (${why})`, {
        code: "UNAVAILABLE",
        details: why,
      });
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const error = (data && data.error) || {};
      const code = error.code || String(response.status);
      const details = error.message || text || response.statusText;
      throw new FluxError(`${method} ${route} failed: ${code}: ${details}`, { status: response.status, code, details });
    }
    return data;
  }
}

// ------------------------------------------------------------------ main

const COMMANDS = { worker, register, run, wait, explain };

// The usage is the header comment of this file, from its first command line to the blank comment.
function usage() {
  const lines = fs.readFileSync(__filename, "utf8").split("\n");
  const start = lines.findIndex((line) => line.startsWith("//   node flux.js"));
  const end = lines.findIndex((line, i) => i > start && line.startsWith("// Every command takes"));
  const body = lines.slice(start, lines.findIndex((line, i) => i > end && !line.startsWith("//")));
  return `${body.map((line) => line.replace(/^\/\/ ?/, "")).join("\n")}\n`;
}

const HELP = new Set(["--help", "-h", "help"]);

async function main(argv) {
  const [command, ...args] = argv;
  if (HELP.has(command) || (COMMANDS[command] && args.some((a) => HELP.has(a)))) {
    process.stdout.write(usage());
    return 0;
  }
  if (!COMMANDS[command]) {
    throw new UsageError(
      `unknown command ${JSON.stringify(command ?? "")}; use one of: ${Object.keys(COMMANDS).join(", ")} ` +
        "(--help shows how)",
    );
  }
  return (await COMMANDS[command](args)) || 0;
}

module.exports = { FluxClient, FluxError, TenantAdmin };

// Run as a program (node flux.js ..., or the flux-node bin); required as a module, only the exports.
if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      console.error(`flux-node: ${err.message}`);
      process.exitCode = err instanceof UsageError ? 2 : 1;
    },
  );
}
