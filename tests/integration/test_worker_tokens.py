"""Worker tokens bound to a pool, against real processes.

The outside review: one worker token serves the whole fleet, and workflow code runs in the
worker process that holds it, so registered code could start a rogue worker anywhere. A pool's
worker token (``flux token create --worker --pool gpu``) brings workers into that pool only and
calls nothing but the worker service; the worker takes its token out of the environment before
any body runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from flux.client import FluxClient
from flux.errors import PermissionDenied
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc", "sse")]

PEEK = """
import os

from flux import ExecutionContext, workflow


@workflow
async def peek_env(ctx: ExecutionContext[None]):
    return {k: v for k, v in os.environ.items() if "TOKEN" in k}
"""


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _exits(process: subprocess.Popen[str], timeout: float = 30) -> int:
    try:
        return process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()


def test_a_pool_worker_token_joins_its_pool_only(cluster: Cluster, tmp_path: Path) -> None:
    minted = cluster.flux("token", "create", "--worker", "--pool", "gpu", "--name", "gpu-nodes")
    token = _ok(minted).strip()
    assert "for pool gpu (worker)" in minted.stderr
    env = {"FLUX_WORKER_TOKEN": token}

    cluster.start_worker("g1", "--pool", "gpu", env=env)  # its own pool: joins
    for name, args, where in (("c1", ("--pool", "cpu"), "pool 'cpu'"), ("n1", (), "no pool")):
        outside = cluster.start_worker(name, *args, env=env, wait=False)
        assert _exits(outside) != 0
        log = (cluster.workdir / f"worker-{name}.log").read_text()
        assert f"this worker token is bound to pool 'gpu'; a worker with it cannot join {where}" in log
        assert "--pool gpu" in log
        assert not cluster.worker_connected(name)

    # Listed with its pool, never its secret; a worker token calls nothing but the worker service.
    listed = json.loads(_ok(cluster.flux("token", "list", "--json")))["tokens"]
    [entry] = [t for t in listed if t["name"] == "gpu-nodes"]
    assert (entry["role"], entry["pool"], entry["tenant"]) == ("worker", "gpu", "")
    assert token not in json.dumps(listed)
    with (
        FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca)) as as_worker,
        pytest.raises(PermissionDenied, match="a worker token cannot call"),
    ):
        as_worker.workers()

    # Revoked: the next registration is refused, whatever its pool.
    _ok(cluster.flux("token", "revoke", entry["id"]))
    late = cluster.start_worker("g2", "--pool", "gpu", env=env, wait=False)
    assert _exits(late) != 0
    assert "revoked" in (cluster.workdir / "worker-g2.log").read_text()


@pytest.mark.transports("grpc")
def test_only_a_cluster_admin_mints_a_worker_token(cluster: Cluster) -> None:
    cluster.client.tenants.create("ml")
    admin = cluster.client.tenants.create_token("ml", role="admin")
    with (
        FluxClient(cluster.address, timeout=10, credentials=Credentials(admin, cluster.ca)) as as_admin,
        pytest.raises(PermissionDenied, match="cannot mint a worker token"),
    ):
        as_admin.tenants.create_worker_token("gpu")
    usage = cluster.flux("token", "create", "--pool", "gpu")
    assert usage.returncode == 2 and "--pool binds a worker token: add --worker" in usage.stderr
    usage = cluster.flux("token", "create", "--worker", "--pool", "gpu", "--tenant", "ml")
    assert usage.returncode == 2 and "neither --tenant nor --role" in usage.stderr
    made = cluster.client.tenants.create_worker_token("gpu", name="py")
    assert made.role == "worker" and made.id


@pytest.mark.transports("grpc")
def test_a_body_finds_no_worker_token_in_its_environment(cluster: Cluster, tmp_path: Path) -> None:
    source = tmp_path / "peek.py"
    source.write_text(PEEK)
    cluster.register(source)
    token_file = tmp_path / "worker.token"
    token_file.write_text(cluster.token(Role.WORKER) + "\n")
    cluster.start_worker("w1", env={"FLUX_WORKER_TOKEN_FILE": str(token_file)})
    done = cluster.client.run("peek_env", None, wait=True, timeout=30)
    seen = json.loads(done.output_json)
    assert "FLUX_WORKER_TOKEN" not in seen and "FLUX_WORKER_TOKEN_FILE" not in seen
    eventually(lambda: cluster.worker_connected("w1"), what="the worker still connected")
