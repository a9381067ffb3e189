"""The Node.js client (clients/node) against the real server: proto/ alone is enough to be a worker or a client.

The Node program loads proto/flux/v1/*.proto at run time; nothing of it comes
from the Python package. Its worker cannot run Python, so it completes each
execution with its input echoed back (see clients/node/flux.js).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

# The Node worker speaks gRPC only; the cluster's worker transport does not apply to it.
pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

NODE_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
FLUX_JS = NODE_DIR / "flux.js"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CREATED = control_pb2.EXECUTION_STATE_CREATED
GI = 1024**3

# Registered by the tests below; the Node client sends the same options as flags.
WORKFLOWS = """
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="node_only", requests=ResourceRequest(memory="1Gi"), affinity={"lang": "node"})
async def node_only(ctx: ExecutionContext[object]):
    return {"input": ctx.input, "worker": ctx.worker_name}


async def shout(ctx: ExecutionContext[str]):
    return {"shout": ctx.input.upper(), "worker": ctx.worker_name}
"""


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with clients/node's packages installed (``npm ci`` when they are missing)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "tests/integration/test_node_client.py needs Node.js 20+ with npm on PATH (CI has them); "
            f"found node={node}, npm={npm}",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"the Node client needs Node.js 20+; {node} is {version}", pytrace=False)
    with _installing():
        _npm_ci(npm)
    return node


@contextlib.contextmanager
def _installing() -> Iterator[None]:
    # Each pytest-xdist process has its own session: one installs while the others wait, then
    # finds the packages there (npm ci first deletes node_modules, under any other reader).
    with open(NODE_DIR / "package.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _npm_ci(npm: str) -> None:
    installed = all((NODE_DIR / "node_modules" / "@grpc" / p).is_dir() for p in ("grpc-js", "proto-loader"))
    if not installed:
        result = subprocess.run(
            [npm, "ci", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            pytest.fail(
                f"npm ci --prefix {NODE_DIR} failed:\n{result.stdout}\n{result.stderr}", pytrace=False
            )


def node_env(cluster: Cluster | None) -> dict[str, str]:
    """Only what the test sets: no FLUX_* of the caller's shell leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUX_")}
    if cluster is None:
        return env
    return {
        **env,
        "FLUX_SERVER": cluster.address,
        "FLUX_WORKER_TOKEN": cluster.token(Role.WORKER),
        "FLUX_API_TOKEN": cluster.token(Role.CLIENT),
    }


def flux_node(
    node: str, cluster: Cluster | None, *args: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, str(FLUX_JS), *args],
        env=node_env(cluster),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_node_worker_claims_and_completes_what_python_submits(
    node: str, cluster: Cluster, tmp_path: Path
) -> None:
    # Registered for the "node" runtime (through the Node client, which declares it): the
    # only workflows a Node worker is given.
    code = tmp_path / "node_only.js"
    code.write_text("// run by the Node worker's echo\n")
    registered = flux_node(
        node, cluster, "register", str(code), "--name", "node_only", "--runtime", "node",
        "--memory", "1Gi", "--affinity", "lang=node",
    )  # fmt: skip
    assert registered.returncode == 0, registered.stderr
    worker = subprocess.Popen(
        [node, str(FLUX_JS), "worker", "nodew", "--max-executions", "2"]
        + ["--label", "lang=node", "--cpus", "3", "--memory", "2Gi", "--disk", "10Gi"],
        env=node_env(cluster),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: cluster.worker_connected("nodew"), what="the Node worker to connect")
        (info,) = [w for w in cluster.client.workers().workers if w.name == "nodew"]
        assert dict(info.labels) == {"lang": "node"} and info.transport == "grpc"
        declared = (info.resources.cpu_total, info.resources.memory_total, info.resources.disk_total)
        assert declared == (3, 2 * GI, 10 * GI)
        (runtime,) = info.runtimes
        assert runtime.startswith("node ") and runtime.split()[1][0].isdigit(), runtime

        # 1Gi each on a 2Gi worker: two fit at once; the Node worker takes two, then drains.
        ids = [cluster.run("node_only", {"n": n}, wait=False).execution_id for n in range(3)]
        _, stderr = worker.communicate(timeout=30)
        assert worker.returncode == 0, stderr
        assert "failed" not in stderr, stderr
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)

    executions = [cluster.client.get(i) for i in ids]
    by_node = [e for e in executions if e.state == COMPLETED]
    assert len(by_node) == 2, executions
    for e in by_node:
        assert (e.worker, e.attempt) == ("nodew", 1)
        assert json.loads(e.output_json) == {
            "input": json.loads(e.input_json),
            "worker": "nodew",
            "workflow": "node_only",
            "attempt": 1,
            "runtime": "node",
        }
    # The third was released (or never sent, or, sent as the stream closed, back after the
    # ack deadline): it waits for a capable worker. A Python worker with the right label is
    # not one: it lacks the node runtime.
    (left,) = [e for e in executions if e.state != COMPLETED]
    eventually(lambda: cluster.client.get(left.execution_id).state == CREATED, timeout=10)
    cluster.start_worker("py", "--label", "lang=node", "--cpus", "32")
    explanation = cluster.client.explain(left.execution_id)
    summary = explanation.summary
    assert summary.startswith("0/1 workers can run it: 1 lacks runtime node (runs python 3."), summary
    assert explanation.infeasible
    (rejection,) = explanation.workers[0].rejections
    assert (rejection.reason, rejection.wanted) == ("missing_runtime", "node")
    assert rejection.offered.startswith("python 3.")
    assert cluster.client.get(left.execution_id).state == CREATED


def test_python_workflows_never_go_to_the_node_worker(node: str, cluster: Cluster) -> None:
    """The issue's case: with only the Node worker connected, a Python workflow waits for a Python worker."""
    worker = subprocess.Popen(
        [node, str(FLUX_JS), "worker", "nodew"], env=node_env(cluster), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        eventually(lambda: cluster.worker_connected("nodew"), what="the Node worker to connect")
        ids = [cluster.run("echo", n, wait=False).execution_id for n in range(4)]
        explained = cluster.flux("execution", "explain", ids[0])
        assert explained.returncode == 0, explained.stderr
        assert explained.stdout.startswith("0/1 workers can run it: 1 lacks runtime python"), explained.stdout
        assert "runs node " in explained.stdout  # the per-worker line says what it runs instead
        assert {cluster.client.get(i).state for i in ids} == {CREATED}
        cluster.start_worker("py")
        finals = cluster.wait_all(ids, timeout=30)
        assert {(f.state, f.worker) for f in finals} == {(COMPLETED, "py")}
        assert [json.loads(f.output_json)["input"] for f in finals] == [0, 1, 2, 3]
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def test_node_client_registers_runs_watches_and_explains(node: str, cluster: Cluster, tmp_path: Path) -> None:
    source = tmp_path / "shout.py"
    source.write_text(WORKFLOWS)
    cluster.start_worker("py", "--label", "role=cpu")

    registered = flux_node(node, cluster, "register", str(source), "--name", "shout", "--memory", "64Mi")
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout.startswith("registered shout v1 ")
    again = flux_node(node, cluster, "register", str(source), "--name", "shout", "--memory", "64Mi")
    assert again.stdout.startswith("unchanged shout v1 "), again.stderr  # idempotent
    ran = flux_node(node, cluster, "run", "shout", '"hello"', "--wait", "--timeout", "20")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["state"], result["worker"], result["attempt"]) == ("COMPLETED", "py", 1)
    assert result["output"] == {"shout": "HELLO", "worker": "py"}
    # The Python side records the same thing.
    recorded = cluster.client.get(result["execution_id"])
    assert (recorded.state, recorded.worker) == (COMPLETED, "py")
    assert json.loads(recorded.output_json) == result["output"]

    # Many waited for in one stream: one line each, the finished ones first, then as each ends.
    done = cluster.client.run("shout", "b", wait=True, timeout=30)
    cluster.client.pause_worker("py")
    held = cluster.client.run("shout", "c").execution_id
    waiting = subprocess.Popen(
        [node, str(FLUX_JS), "wait", done.execution_id, held, "--timeout", "30"],
        env=node_env(cluster),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiting.stdout is not None
    first = json.loads(waiting.stdout.readline())
    assert (first["execution_id"], first["state"]) == (done.execution_id, "COMPLETED")
    cluster.client.cancel(held)
    out, err = waiting.communicate(timeout=30)
    second = json.loads(out)
    assert (second["execution_id"], second["state"]) == (held, "CANCELLED")
    assert waiting.returncode == 1, err  # one of them did not complete
    cluster.client.resume_worker("py")

    # A workflow no connected worker can ever run stays CREATED, and explain says why.
    wanted = ["--entrypoint", "shout", "--cpu", "512", "--affinity", "role=gpu-box"]
    assert flux_node(node, cluster, "register", str(source), "--name", "huge", *wanted).returncode == 0
    submitted = flux_node(node, cluster, "run", "huge", '"x"')
    assert submitted.returncode == 0, submitted.stderr
    execution_id = submitted.stdout.strip()
    explained = flux_node(node, cluster, "explain", execution_id)
    assert explained.returncode == 0, explained.stderr
    summary = explained.stdout.strip()
    assert summary.startswith("0/1 workers can run it:") and "role=gpu-box" in summary, summary
    as_json = json.loads(flux_node(node, cluster, "explain", execution_id, "--json").stdout)
    assert as_json["state"] == "EXECUTION_STATE_CREATED" and as_json["infeasible"] is True
    (verdict,) = as_json["workers"]
    assert verdict["worker"] == "py" and verdict["fits"] is False
    assert {r["reason"] for r in verdict["rejections"]} >= {"label_mismatch", "insufficient_cpu"}
    assert cluster.client.explain(execution_id).summary == summary
    assert cluster.client.get(execution_id).state == CREATED

    # gpu_memory travels from a Node registration like any other request field.
    vram = ["--entrypoint", "shout", "--gpu", "1", "--gpu-memory", "20Gi"]
    assert flux_node(node, cluster, "register", str(source), "--name", "vram", *vram).returncode == 0
    [registered_vram] = cluster.client.workflows("vram").workflows
    assert (registered_vram.requests.gpu, registered_vram.requests.gpu_memory) == (1, 20 * 1024**3)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        pytest.param(["worker", "w", "--cpu", "2"], "'--cpu'", id="unknown flag"),
        pytest.param(["worker", "w", "--max-executions", "0"], "--max-executions", id="bad count"),
        pytest.param(["worker", "w", "--label", "role"], "--label", id="label without value"),
        pytest.param(["register", "f.py", "--name", "x", "--memory", "8GB"], "--memory", id="bad quantity"),
        pytest.param(
            ["register", "f.py", "--name", "x", "--gpu-memory", "20GB"], "--gpu-memory", id="bad gpu memory"
        ),
        pytest.param(["run", "x", "--timeout", "soon"], "--timeout", id="bad timeout"),
        pytest.param(["run", "x", "--server", "nowhere"], "--server", id="bad server"),
        pytest.param(["wait"], "EXECUTION_ID", id="wait without ids"),
    ],
)
def test_bad_flags_are_refused_by_name(node: str, args: list[str], named: str) -> None:
    # Refused before any connection: no server needed.
    refused = flux_node(node, None, *args)
    assert refused.returncode == 2
    assert named in refused.stderr, refused.stderr


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"], ["run", "--help"]], ids=" ".join)
def test_help_prints_the_usage(node: str, args: list[str]) -> None:
    shown = flux_node(node, None, *args)
    assert shown.returncode == 0 and shown.stderr == ""
    for command in (
        "worker NAME",
        "register FILE --name NAME",
        "run NAME [INPUT_JSON]",
        "explain EXECUTION_ID",
    ):
        assert f"node flux.js {command}" in shown.stdout
    assert "$FLUX_SERVER" in shown.stdout


def test_no_command_points_at_help_and_unreachable_server_has_no_empty_note(node: str) -> None:
    missing = flux_node(node, None)
    assert missing.returncode == 2 and "--help shows how" in missing.stderr
    # Port 1: nothing listens, so the connection is refused at once.
    env = {**node_env(None), "FLUX_API_TOKEN": "t"}
    refused = subprocess.run(
        [node, str(FLUX_JS), "run", "x", "--server", "127.0.0.1:1"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.startswith("flux-node: RunWorkflow failed: UNAVAILABLE: ")
    assert "Resolution note" not in refused.stderr and refused.stderr.strip().endswith("127.0.0.1:1")


def test_node_worker_leaves_cleanly_on_sigterm_and_fails_loudly_when_the_server_goes(
    node: str, cluster: Cluster
) -> None:
    def start(name: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [node, str(FLUX_JS), "worker", name],
            env=node_env(cluster),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        eventually(lambda: cluster.worker_connected(name), what=f"the Node worker {name} to connect")
        return process

    leaving = start("leaving")
    leaving.send_signal(signal.SIGTERM)
    _, stderr = leaving.communicate(timeout=30)
    assert leaving.returncode == 0, stderr
    eventually(lambda: not cluster.worker_connected("leaving"), what="the server to see the stream closed")

    orphan = start("orphan")
    cluster.kill_server()
    _, stderr = orphan.communicate(timeout=30)
    assert orphan.returncode == 1
    assert "flux-node: Connect failed: UNAVAILABLE" in stderr, stderr


# Each step's answer, or its refusal as a FluxError carries it, as one JSON object.
TENANT_SCRIPT = r"""
const { FluxClient } = require(process.argv[2]);
const steps = JSON.parse(process.argv[3]);
(async () => {
  const clients = { admin: new FluxClient({ gateway: process.env.FLUX_GATEWAY }) };
  const out = {};
  for (const [label, as, method, ...args] of steps) {
    try {
      const answer = await clients[as].tenants[method](...args);
      out[label] = { ok: answer === undefined ? null : answer };
      // A token minted here signs in a client of its own for the steps after it.
      if (method === "createToken") clients[label] = new FluxClient({ gateway: process.env.FLUX_GATEWAY, token: answer });
    } catch (err) {
      out[label] = { error: err.message, code: err.code, status: err.status, name: err.name };
    }
  }
  console.log(JSON.stringify(out));
})();
"""


def _tenant_steps(node: str, cluster: Cluster, tmp_path: Path, steps: list[list[object]]) -> dict:
    script = tmp_path / "tenants.js"
    script.write_text(TENANT_SCRIPT)
    env = {k: v for k, v in node_env(cluster).items() if k != "FLUX_SERVER"}
    result = subprocess.run(
        [node, str(script), str(FLUX_JS), json.dumps(steps)],
        env={**env, "FLUX_GATEWAY": cluster.gateway_url}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_node_client_administers_tenants_over_http(node: str, cluster: Cluster, tmp_path: Path) -> None:
    out = _tenant_steps(node, cluster, tmp_path, [
        ["create", "admin", "create", "ml",
         {"gpu": 4, "memory": "8Gi", "cohort": "research", "borrowing_limit": {"gpu": 2}}],
        ["set", "admin", "set", "ml", {"weight": 3, "memory": None, "gpu_memory": "40Gi"}],
        ["apply", "admin", "apply", [{"name": "web", "cpu": 8}, {"name": "ops"}]],
        ["list", "admin", "list"],
        ["get", "admin", "get", "web"],
        ["web_reader", "admin", "createToken", "web", "read"],
        ["ml_token", "admin", "createToken", "ml"],
        ["delete", "admin", "delete", "ops"],
        ["after_delete", "admin", "list"],
    ])  # fmt: skip
    assert out["create"] == {"ok": {
        "name": "ml", "gpu": 4, "memory": "8Gi", "cohort": "research", "borrowing_limit": {"gpu": 2}, "weight": 1,
    }}  # fmt: skip
    assert out["set"] == {"ok": {
        "name": "ml", "gpu": 4, "gpu_memory": "40Gi", "cohort": "research", "borrowing_limit": {"gpu": 2},
        "weight": 3,
    }}  # fmt: skip
    assert out["apply"] == {"ok": [{"name": "web", "cpu": 8, "weight": 1}, {"name": "ops", "weight": 1}]}
    assert [t["name"] for t in out["list"]["ok"]] == ["default", "ml", "ops", "web"]
    assert out["get"] == {"ok": {"name": "web", "cpu": 8, "weight": 1}}
    assert out["delete"] == {"ok": None}
    assert [t["name"] for t in out["after_delete"]["ok"]] == ["default", "ml", "web"]

    # The Python client and the core agree on what Node stored, and on its tokens.
    assert cluster.client.tenants.get("ml").to_dict() == out["set"]["ok"]
    for token, tenant, role in (
        (out["web_reader"]["ok"], "web", "read"),
        (out["ml_token"]["ok"], "ml", "submit"),
    ):
        answer = httpx.get(
            f"{cluster.gateway_url}/status", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert (answer.headers["x-flux-tenant"], answer.headers["x-flux-role"]) == (tenant, role)


def test_node_client_tenant_refusals_carry_the_message_naming_the_field(
    node: str, cluster: Cluster, tmp_path: Path
) -> None:
    cluster.client.tenants.create("ml", gpu=1)
    out = _tenant_steps(node, cluster, tmp_path, [
        ["exists", "admin", "create", "ml"],
        ["no_cohort", "admin", "create", "web", {"gpu": 2, "borrowing_limit": {"gpu": 1}}],
        ["weight", "admin", "create", "web", {"weight": 2_000_000}],
        # 0 on the wire is "the default, 1": refused here rather than stored as 1.
        ["weight_zero", "admin", "create", "web", {"weight": 0}],
        ["name", "admin", "create", "Web"],
        ["set_gpu", "admin", "set", "ml", {"gpu": "four"}],
        ["set_field", "admin", "set", "ml", {"gpus": 1}],
        ["missing", "admin", "get", "nobody"],
        ["default", "admin", "delete", "default"],
        ["role", "admin", "createToken", "ml", "boss"],
        ["token_for_nobody", "admin", "createToken", "nobody"],
        ["apply_bad", "admin", "apply", [{"name": "web", "cpu": 2}, {"name": "db", "lending_limit": {"cpu": 1}}]],
        # Refused here, before anything is sent: the wire carries bytes, so a quantity is read first.
        ["quantity", "admin", "create", "web", {"memory": "lots"}],
        ["unknown", "admin", "create", "web", {"gpus": 1}],
        ["count", "admin", "apply", [{"name": "web", "cpu": 1.5}]],
        ["reader", "admin", "createToken", "ml", "read"],
        ["not_admin", "reader", "list"],
    ])  # fmt: skip
    expected = {
        "exists": (409, "ALREADY_EXISTS", "POST /tenants failed: ALREADY_EXISTS: ", "'ml'"),
        "no_cohort": (422, "INVALID_ARGUMENT", "POST /tenants failed: INVALID_ARGUMENT: ",
                      "borrowing_limit needs a cohort"),
        "weight": (422, "INVALID_ARGUMENT", "POST /tenants failed: INVALID_ARGUMENT: ", "weight must be a number > 0"),
        "weight_zero": (0, "INVALID_ARGUMENT", "weight must be a number > 0 (default 1); got 0", ""),
        "name": (422, "INVALID_ARGUMENT", "POST /tenants failed: INVALID_ARGUMENT: ", "a tenant name is"),
        "set_gpu": (422, "INVALID_ARGUMENT", "PATCH /tenants/ml failed: INVALID_ARGUMENT: ",
                    "gpu must be a whole number >= 0; got 'four'"),
        "set_field": (422, "INVALID_ARGUMENT", "PATCH /tenants/ml failed: INVALID_ARGUMENT: ",
                      "unknown tenant field 'gpus'"),
        "missing": (404, "NOT_FOUND", "GET /tenants/nobody failed: NOT_FOUND: ", "tenant 'nobody' does not exist"),
        "default": (409, "FAILED_PRECONDITION", "DELETE /tenants/default failed: FAILED_PRECONDITION: ", "default"),
        "role": (422, "INVALID_ARGUMENT", "POST /tokens failed: INVALID_ARGUMENT: ", "role 'boss' is invalid"),
        "token_for_nobody": (404, "NOT_FOUND", "POST /tokens failed: NOT_FOUND: ", "'nobody'"),
        "apply_bad": (422, "INVALID_ARGUMENT", "PUT /tenants failed: INVALID_ARGUMENT: ", "lending_limit.cpu is set"),
        "quantity": (0, "INVALID_ARGUMENT", "memory must be bytes or a quantity like", '"lots"'),
        "unknown": (0, "INVALID_ARGUMENT", 'unknown tenant field "gpus"; the fields are name, cpu', "weight"),
        "count": (0, "INVALID_ARGUMENT", "tenants[0]: cpu must be a whole number >= 0", "1.5"),
        "not_admin": (403, "PERMISSION_DENIED", "GET /tenants failed: PERMISSION_DENIED: ",
                      "a read token of tenant ml cannot call"),
    }  # fmt: skip
    for label, (status, code, start, part) in expected.items():
        refusal = out[label]
        assert "error" in refusal, (label, refusal)
        assert (refusal["name"], refusal["status"], refusal["code"]) == ("FluxError", status, code), (
            label,
            refusal,
        )
        assert refusal["error"].startswith(start) and part in refusal["error"], (label, refusal)
    # Nothing refused was stored: all or none.
    assert [t.name for t in cluster.client.tenants.list()] == ["default", "ml"]
