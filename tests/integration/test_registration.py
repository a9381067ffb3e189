"""``flux workflow register`` through the real CLI against a real server: read, not run; idempotent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flux import aio
from flux.registration.loader import NeedsImport
from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

TORCHY = """\
import torch_not_installed_xyz
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(
    name="train",
    requests=ResourceRequest(cpu=1, packages=["numpy"]),
    affinity={"role": "training"},
    max_attempts=1,
)
async def train(ctx: ExecutionContext[dict]):
    return torch_not_installed_xyz.__version__


@workflow
async def plain(ctx):
    return "ran"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_registering_never_runs_the_file(cluster: Cluster, tmp_path: Path) -> None:
    path = write(tmp_path, "torchy.py", TORCHY)
    registered = cluster.flux("workflow", "register", str(path))
    assert registered.returncode == 0, registered.stderr
    assert registered.stderr == ""  # read without importing: no note
    lines = registered.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["registered", "train", "v1"],
        ["registered", "plain", "v1"],
    ]
    # What was read is what the decorator says: the waiting execution's shape shows it.
    submitted = cluster.flux("workflow", "run", "train")
    assert submitted.returncode == 0, submitted.stderr
    why = json.loads(cluster.flux("execution", "explain", submitted.stdout.strip(), "--json").stdout)
    assert why["summary"] == "0/0 workers can run it: no worker is connected"
    status = json.loads(cluster.flux("status", "--json").stdout)
    [pending] = [p for p in status["pending"] if p["oldest_workflow"] == "train"]
    assert pending["requests"]["cpu"] == 1 and pending["requests"]["packages"] == ["numpy"]
    assert pending["affinity"] == {"role": "training"}
    # The worker imports the file for real: the missing module fails the run there, with its name.
    cluster.start_worker("w", packages={"numpy": "2.0"})
    ran = cluster.flux("workflow", "run", "plain", "--wait")
    assert ran.returncode == 1
    assert "No module named 'torch_not_installed_xyz'" in ran.stderr


def test_syntax_error_is_one_message(cluster: Cluster, tmp_path: Path) -> None:
    path = write(
        tmp_path, "broken.py", "from flux import workflow\n\n@workflow\nasync def f(ctx)\n    return 1\n"
    )
    result = cluster.flux("workflow", "register", str(path))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {path}:4:17: expected ':'",
        "    async def f(ctx)",
        "                    ^",
    ]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_value_that_needs_the_file_is_refused_unless_allow_import(cluster: Cluster, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "dynamic.py",
        "import os\nfrom flux import workflow\n\n"
        "@workflow.with_options(max_attempts=int(os.environ.get('ATTEMPTS', '2')))\n"
        "async def dynamic(ctx):\n    return 1\n",
    )
    # Not without asking: registering never runs the file's code unless told to.
    refused = cluster.flux("workflow", "register", str(path))
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"error: {path}:4: max_attempts=int(os.environ.get('ATTEMPTS', '2')) is not a literal; "
    )
    assert "--allow-import" in refused.stderr and "Traceback" not in refused.stderr
    assert cluster.query("SELECT name FROM workflows WHERE name='dynamic'") == []
    result = cluster.flux("workflow", "register", str(path), "--allow-import")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"note: {path}:4: max_attempts=int(os.environ.get('ATTEMPTS', '2')) is not a literal; "
        "importing the file to read it"
    ]
    assert result.stdout.startswith("registered dynamic v1 ")
    [(attempts,)] = cluster.query("SELECT max_attempts FROM workflows WHERE name='dynamic'")
    assert attempts == 2


@pytest.mark.backends("sqlite", "postgres")
def test_registering_identical_source_again_is_idempotent(cluster: Cluster, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "answer.py",
        "from flux import workflow\n\n@workflow\nasync def answer(ctx):\n    return 1\n",
    )
    first = cluster.flux("workflow", "register", str(path))
    again = cluster.flux("workflow", "register", str(path))
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    digest = first.stdout.split()[3]
    assert first.stdout.strip() == f"registered answer v1 {digest}"
    assert again.stdout.strip() == f"unchanged answer v1 {digest}: already registered as is"
    # Changed source: a new version, which is now the latest.
    path.write_text(path.read_text().replace("return 1", "return 2"))
    changed = cluster.flux("workflow", "register", str(path))
    assert changed.stdout.startswith("registered answer v2 ")
    assert cluster.flux("workflow", "register", str(path)).stdout.startswith("unchanged answer v2 ")
    # Back to the first source: it is compared with the latest (v2), so it becomes v3.
    path.write_text(path.read_text().replace("return 2", "return 1"))
    assert cluster.flux("workflow", "register", str(path)).stdout.startswith("registered answer v3 ")
    rows = cluster.query("SELECT version FROM workflows WHERE name='answer' ORDER BY version")
    assert [version for (version,) in rows] == [1, 2, 3]
    # Through the API: the same answer, marked unchanged.
    response = cluster.client.register_file(path)
    assert [(w.version, w.unchanged) for w in response.workflows] == [(3, True)]
    # The same source with other metadata (as another client may send) is a new version.
    stub = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
    request = control_pb2.RegisterWorkflowRequest(filename="answer.py", source=path.read_text())
    request.workflows.append(control_pb2.WorkflowMetadata(name="answer", entrypoint="answer", max_attempts=5))
    other = stub.RegisterWorkflow(request, timeout=10).workflows
    assert [(w.version, w.unchanged) for w in other] == [(4, False)]
    assert [(w.version, w.unchanged) for w in stub.RegisterWorkflow(request, timeout=10).workflows] == [
        (4, True)
    ]
    cluster.start_worker("w")
    assert cluster.run("answer").output_json == "1"


def test_both_python_clients_refuse_to_import_unless_asked(cluster: Cluster, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "ran.py",
        "import pathlib\nfrom flux import workflow\n\n"
        "ATTEMPTS = pathlib.Path(__file__).with_name('ran.txt').write_text('ran')\n\n"
        "@workflow.with_options(max_attempts=ATTEMPTS)\nasync def ran(ctx):\n    return 1\n",
    )
    with pytest.raises(NeedsImport, match=r"ran\.py:4: max_attempts=ATTEMPTS holds "):
        cluster.client.register_file(path)

    async def asynchronously(allow_import: bool) -> control_pb2.RegisterWorkflowResponse:
        async with aio.FluxClient(
            cluster.address, timeout=10, credentials=cluster.credentials(Role.CLIENT)
        ) as client:
            return await client.register_file(path, allow_import=allow_import)

    with pytest.raises(NeedsImport):
        asyncio.run(asynchronously(False))
    assert not (tmp_path / "ran.txt").exists()
    # On purpose: the file runs (3 characters written: max_attempts=3).
    [registered] = asyncio.run(asynchronously(True)).workflows
    assert registered.name == "ran" and (tmp_path / "ran.txt").read_text() == "ran"
