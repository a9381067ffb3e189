"""A large fleet through the real server: ListWorkers pages, the CLI follows the pages, status summarises.

1,001 workers register over the real gRPC wire (Register only: a listing
shows registered workers whether or not they stream), one more than the page
`flux workers list` asks for, so the CLI has to follow a token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc

FLEET = 1001


@pytest.fixture
def fleet_server(tmp_path: Path) -> Iterator[Cluster]:
    """A real server whose registered-but-silent workers stay listed for the whole test (grace 600 s)."""
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--grace-period", "600")
        yield cluster
    finally:
        cluster.close()


def _register(cluster: Cluster, count: int) -> list[str]:
    stub = worker_pb2_grpc.WorkerServiceStub(cluster.channel(Role.WORKER))
    resources = resources_pb2.WorkerResources(
        cpu_total=2, cpu_available=2, memory_total=1 << 30, memory_available=1 << 30,
        disk_total=1 << 30, disk_free=1 << 30,
    )  # fmt: skip
    names = [f"page-{i:04d}" for i in range(count)]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(lambda n: stub.Register(worker_pb2.RegisterRequest(name=n, resources=resources)), names)
        )
    return names


def test_listing_pages_through_a_large_fleet_and_status_summarises_it(fleet_server: Cluster) -> None:
    cluster = fleet_server
    names = _register(cluster, FLEET)
    control = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))

    # An unpaged call answers as before: every worker, no token.
    whole = control.ListWorkers(control_pb2.ListWorkersRequest())
    assert [w.name for w in whole.workers] == names and whole.next_page_token == ""

    # Pages of 400 by name, each token leading to the next.
    seen, token, pages = [], "", 0
    while True:
        page = control.ListWorkers(control_pb2.ListWorkersRequest(page_size=400, page_token=token))
        seen += [w.name for w in page.workers]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == names and pages == 3

    # The CLI follows the pages (1,000 a call) to the same whole listing.
    listed = json.loads(cluster.flux("workers", "list", "--json").stdout)
    assert [w["name"] for w in listed["workers"]] == names

    # Status counts every worker and lists none of them.
    status = json.loads(cluster.flux("status", "--json").stdout)
    assert status["workers"] == [] and status["workers_omitted"] == FLEET
    assert "1001 workers (too many to list here: flux workers list)" in cluster.flux("status").stdout

    # Over HTTP: ?limit= pages the same way.
    headers = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
    with httpx.Client(base_url=cluster.gateway_url, trust_env=False, timeout=30) as http:
        first = http.get("/workers", params={"limit": 2}, headers=headers).json()
        assert [w["name"] for w in first["workers"]] == names[:2]
        second = http.get(
            "/workers", params={"limit": 2, "page_token": first["next_page_token"]}, headers=headers
        )
        assert [w["name"] for w in second.json()["workers"]] == names[2:4]


def test_a_bad_page_request_is_refused_naming_the_field(fleet_server: Cluster) -> None:
    cluster = fleet_server
    control = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
    with pytest.raises(grpc.RpcError) as info:
        control.ListWorkers(control_pb2.ListWorkersRequest(page_size=-1))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_size must be between 1 and 10000" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        control.ListWorkers(control_pb2.ListWorkersRequest(page_size=1, page_token="%%%"))
    assert "page_token is not one a worker listing returned" in info.value.details()
