"""The CLI's renderers are pure: control-plane messages (and a clock value) in, text out."""

from __future__ import annotations

import json

import pytest

from flux.cli import main
from flux.cli.parser import build_parser
from flux.cli.render.common import byte_pair, duration, requests_text
from flux.cli.render.status import PENDING_HEADER, quantile, status_dict, status_text
from flux.cli.render.workers import WORKER_HEADER, worker_dict, workers_text
from flux.v1 import control_pb2, resources_pb2

GiB = 1024**3
NOW_MS = 1_700_000_000_000


def worker(
    name: str,
    *,
    cpu: tuple[int, int] = (0, 8),
    memory: tuple[int, int] = (0, 16 * GiB),
    disk: tuple[int, int] = (0, 100 * GiB),
    gpus: tuple[int, int] = (0, 0),
    load: tuple[int, int] = (0, 16),
    connected: bool = True,
    draining: bool = False,
    transport: str = "grpc",
    seen_ago_s: float = 1,
    labels: dict[str, str] | None = None,
    free: tuple[int, int, int, int] | None = None,
) -> control_pb2.WorkerInfo:
    """``cpu``, ``memory``, ``disk``, ``gpus`` are (reserved, total); ``free`` defaults to total - reserved."""
    if free is None:
        free = (cpu[1] - cpu[0], memory[1] - memory[0], disk[1] - disk[0], gpus[1] - gpus[0])
    return control_pb2.WorkerInfo(
        name=name,
        labels=labels or {},
        resources=resources_pb2.WorkerResources(
            cpu_total=cpu[1],
            memory_total=memory[1],
            disk_total=disk[1],
            gpus=[resources_pb2.Gpu(index=i) for i in range(gpus[1])],
        ),
        reserved=control_pb2.Reserved(
            cpu=cpu[0], memory=memory[0], disk=disk[0], gpu_indices=list(range(gpus[0]))
        ),
        active_executions=load[0],
        capacity=load[1],
        connected=connected,
        draining=draining,
        transport=transport,
        last_seen_ms=int(NOW_MS - seen_ago_s * 1000),
        free=control_pb2.Allocation(cpu=free[0], memory=free[1], disk=free[2], gpus=free[3]),
    )


@pytest.mark.parametrize(
    ("used", "total", "text"),
    [
        (0, 0, "0/0 B"),
        (512, 1000, "512/1000 B"),
        (12 * GiB, 16 * GiB, "12.0/16.0 GiB"),
        (512 * 1024**2, 16 * GiB, "0.5/16.0 GiB"),
        (3 * 1024**4, 2 * 1024**4, "3.0/2.0 TiB"),
        (0, 1536 * 1024**2, "0.0/1.5 GiB"),
    ],
    ids=["nothing", "bytes", "gib", "fraction", "over-reserved uses the larger", "mib total"],
)
def test_byte_pairs_share_the_unit_of_the_larger(used: int, total: int, text: str) -> None:
    assert byte_pair(used, total) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.9, "59s"), (60, "1m00s"), (185, "3m05s"), (7620, "2h07m"), (273600, "3d04h"), (-5, "0s")],
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_workers_table_aligns_free_over_advertised_beside_reserved() -> None:
    text = workers_text(
        [
            worker("gpu-box", cpu=(6, 32), memory=(12 * GiB, 64 * GiB), gpus=(1, 2), load=(3, 16),
                   labels={"zone": "a", "role": "training"}),
            worker("web-1", transport="sse", draining=True, seen_ago_s=75),
            worker("old", connected=False, seen_ago_s=4000, load=(2, 4)),
        ],
        NOW_MS,
    )  # fmt: skip
    lines = text.splitlines()
    assert lines[0].split() == list(WORKER_HEADER)
    gpu, web, old = lines[1:]
    assert gpu.split()[:4] == ["gpu-box", "connected", "grpc", "3/16"]
    assert "free 26/32 (reserved 6)" in gpu and "free 52.0/64.0 GiB (reserved 12.0 GiB)" in gpu
    assert "free 1/2 (reserved 1)" in gpu and "1s ago" in gpu
    assert gpu.endswith("role=training,zone=a")
    assert web.split()[1:3] == ["draining", "sse"] and "1m15s ago" in web and web.endswith("-")
    assert old.split()[1] == "disconnected" and "1h06m ago" in old
    # LOAD is a number: right-aligned, its cells end where its header does. The resource columns
    # are phrases: left-aligned, each cell starts under its header (not 20 columns to its left).
    end = lines[0].index("LOAD") + len("LOAD")
    assert all(line[end - 1] != " " and line[end] == " " for line in lines)
    for column in ("CPU", "MEMORY", "GPUS", "DISK"):
        start = lines[0].index(column)
        assert all(line[start - 2 : start] == "  " and line[start] == "f" for line in lines[1:]), column


def test_a_loaded_host_shows_little_free_with_nothing_reserved() -> None:
    # The case: explain says "0 of 2 cores free"; the table must say the same, and why.
    busy = worker("loaded", cpu=(0, 2), free=(0, 3 * GiB, 50 * GiB, 0))
    row = workers_text([busy], NOW_MS).splitlines()[1]
    assert "free 0/2 (reserved 0)" in row and "free 3.0/16.0 GiB (reserved 0 B)" in row
    assert worker_dict(busy)["free"] == {"cpu": 0, "memory": 3 * GiB, "disk": 50 * GiB, "gpus": 0}
    assert worker_dict(busy)["reserved"]["cpu"] == 0


def test_no_workers() -> None:
    assert workers_text([], NOW_MS) == "no workers registered"


def status() -> control_pb2.ClusterStatus:
    message = control_pb2.ClusterStatus(
        now_ms=NOW_MS,
        started_at_ms=NOW_MS - 3_600_000,
        workers=[worker("w1", cpu=(2, 8), gpus=(0, 0))],
        pending=[
            control_pb2.PendingShape(
                requests=resources_pb2.ResourceRequest(gpu=2, memory=8 * GiB, packages=["torch>=2"]),
                affinity={"role": "training"},
                count=3,
                oldest_wait_ms=125_000,
                oldest_execution_id="e" * 32,
                oldest_workflow="train",
                summary="0/1 workers can run it: 1 lacks label role=training",
                reason="infeasible",
            )
        ],
        pending_by_reason={"busy": 1, "infeasible": 3, "no_worker": 0},
        fleet=control_pb2.FleetTotals(
            connected_by_transport={"grpc": 1, "sse": 0},
            disconnected=1,
            allocatable=control_pb2.Allocation(cpu=8, memory=16 * GiB, disk=100 * GiB),
            reserved=control_pb2.Allocation(cpu=2, memory=GiB),
            free=control_pb2.Allocation(cpu=1, memory=4 * GiB, disk=90 * GiB),
            active_executions=1,
            capacity=16,
        ),
        executions=[
            control_pb2.StateCount(state=control_pb2.EXECUTION_STATE_CREATED, count=4),
            control_pb2.StateCount(state=control_pb2.EXECUTION_STATE_RUNNING, count=1),
            control_pb2.StateCount(state=control_pb2.EXECUTION_STATE_COMPLETED, count=120),
        ],
        counters=control_pb2.LifecycleCounters(
            submitted=125, dispatched=123, claimed=121, completed=120,
            requeued={"released": 1, "worker_lost": 0, "ack_deadline": 2}, stream_reconnects=5,
        ),
        latencies=[
            control_pb2.LatencyHistogram(stage=stage, bounds=[0.001, 0.01], counts=[90, 9, 1], sum=0.2, count=100)
            for stage in ("dispatched", "claimed", "started")
        ],
    )  # fmt: skip
    return message


def test_status_text_summarises_the_fleet_and_the_queue_by_shape() -> None:
    text = status_text(status())
    lines = text.splitlines()
    assert lines[0] == "workers     1 connected (1 grpc), 1 disconnected"
    assert lines[1].startswith("reserved    2/8 cores   1.0/16.0 GiB memory   0/0 GPUs")
    assert lines[2] == (
        "free        1/8 cores   4.0/16.0 GiB memory   0/0 GPUs   90.0/100.0 GiB disk"
        "   (observed, less reservations: what explain counts)"
    )
    assert lines[3] == "pending     4 (1 busy, 3 infeasible, 0 no worker)"
    assert "120 completed" in lines[4] and "since the core started 1h00m ago" in lines[4]
    assert lines[5] == (
        "activity    123 placements, 3 requeued (1 released, 0 worker lost, 2 ack deadline, 0 stream overflowed, "
        "0 preempted), 5 stream reconnects"
    )
    assert "submit->dispatched p50 <=1 ms p99 <=10 ms" in lines[6]
    header = next(line for line in lines if line.startswith("COUNT"))
    assert header.split() == list(PENDING_HEADER)
    row = lines[lines.index(header) + 1]
    assert row.split()[:3] == ["3", "2m05s", "train"]
    assert "memory=8.0 GiB gpu=2 torch>=2" in row and "role=training" in row
    assert row.endswith("infeasible  -          0/1 workers can run it: 1 lacks label role=training")
    assert any(line.startswith("w1 ") for line in lines)


def test_status_text_says_when_nothing_waits() -> None:
    message = control_pb2.ClusterStatus(now_ms=NOW_MS, started_at_ms=NOW_MS)
    assert status_text(message).endswith("nothing pending")


def test_status_json_is_one_object_with_everything() -> None:
    body = json.loads(json.dumps(status_dict(status())))
    assert body["fleet"]["connected"] == 1 and body["fleet"]["reserved"]["cpu"] == 2
    assert body["fleet"]["free"] == {"cpu": 1, "memory": 4 * GiB, "disk": 90 * GiB, "gpus": 0}
    assert body["pending_by_reason"] == {"busy": 1, "infeasible": 3, "no_worker": 0}
    [shape] = body["pending"]
    assert (shape["count"], shape["reason"], shape["oldest_execution_id"]) == (3, "infeasible", "e" * 32)
    assert shape["requests"]["gpu"] == 2 and shape["affinity"] == {"role": "training"}
    assert body["executions"] == {"CREATED": 4, "RUNNING": 1, "COMPLETED": 120}
    assert body["counters"]["requeued"] == {"ack_deadline": 2, "released": 1, "worker_lost": 0}
    assert body["latency_seconds"]["started"]["p50"] == 0.001
    assert body["latency_seconds"]["started"]["p99"] == 0.01
    assert body["workers"][0]["name"] == "w1" and body["workers"][0]["draining"] is False


def test_status_shows_pools_with_their_demand() -> None:
    from flux.v1 import pools_pb2

    message = control_pb2.ClusterStatus(now_ms=NOW_MS, started_at_ms=NOW_MS)
    message.pools.append(
        pools_pb2.Pool(
            spec=pools_pb2.PoolSpec(name="a100", source="declared"), pending=5, demand_workers=3, active=True
        )
    )
    assert "pools       a100 0/3 workers (5 pending)" in status_text(message)
    (pool,) = status_dict(message)["pools"]
    assert (pool["name"], pool["demand_workers"], pool["active"]) == ("a100", 3, True)


def test_status_shows_each_tenants_usage_against_its_quota() -> None:
    from flux.v1 import tenants_pb2

    message = control_pb2.ClusterStatus(now_ms=NOW_MS, started_at_ms=NOW_MS)
    message.tenants.append(
        tenants_pb2.TenantStatus(
            name="ml",
            usage=tenants_pb2.TenantLimits(cpu=3, memory=2 * GiB, gpu=1, gpu_memory=GiB),
            quota=tenants_pb2.TenantLimits(cpu=4, gpu=2, gpu_memory=4 * GiB),
            pending=5,
        )
    )
    message.tenants.append(tenants_pb2.TenantStatus(name="default"))
    assert (
        "tenants     ml 3/4 cores, 2.0 GiB/- memory, 1/2 GPUs, 1.0/4.0 GiB VRAM (5 pending); "
        "default nothing held (0 pending)   (used/quota)"
    ) in status_text(message, width=400)
    ml, _ = status_dict(message)["tenants"]
    assert ml == {
        "name": "ml",
        "pending": 5,
        "usage": {"cpu": 3, "memory": 2 * GiB, "gpu": 1, "gpu_memory": GiB, "executions": 0},
        "quota": {"cpu": 4, "gpu": 2, "gpu_memory": 4 * GiB},
    }


def test_quantile_is_the_bound_of_its_bucket() -> None:
    h = control_pb2.LatencyHistogram(bounds=[0.1, 1.0], counts=[1, 0, 1], count=2)
    assert quantile(h, 0.5) == 0.1
    assert quantile(h, 0.99) is None  # above every bound
    assert quantile(control_pb2.LatencyHistogram(bounds=[0.1], counts=[0, 0]), 0.5) is None


# ---- the commands' flags -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["start", "server", "--log-format", "json"],
        ["start", "worker", "w1", "--log-format", "json"],
        ["start", "gateway", "--core", "127.0.0.1:1", "--log-format", "text"],
    ],
)
def test_every_long_running_command_takes_a_log_format(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).log_format in ("json", "text")


def test_status_and_workers_list_take_server_and_json() -> None:
    for argv in (["status"], ["workers", "list"]):
        args = build_parser().parse_args([*argv, "--server", "h:1", "--json"])
        assert (args.server, args.json) == ("h:1", True)


def test_an_unknown_log_format_in_the_environment_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("FLUX_LOG_FORMAT", "xml")
    assert main(["status", "--server", "127.0.0.1:1"]) == 2
    assert "FLUX_LOG_FORMAT" in capsys.readouterr().err


def test_workers_table_and_json_say_which_limit_applied() -> None:
    boxed = worker("in-a-pod", cpu=(0, 2), memory=(0, 4 * GiB))
    boxed.resources.limits.extend([
        resources_pb2.ResourceLimit(resource="cpu", source="cgroup cpu.max", limit=2, host=64),
        resources_pb2.ResourceLimit(resource="memory", source="cgroup memory.max", limit=4 * GiB, host=256 * GiB),
    ])  # fmt: skip
    plain = worker("bare-metal")
    lines = workers_text([boxed, plain], NOW_MS).splitlines()
    assert lines[0].split() == list(WORKER_HEADER)
    limits_at = lines[0].index("LIMITS")
    assert lines[1][limits_at:].startswith("cpu=cpu.max,memory=memory.max")
    assert lines[2][limits_at:].startswith("- ")
    assert worker_dict(boxed)["resources"]["limits"] == [
        {"resource": "cpu", "source": "cgroup cpu.max", "limit": 2, "host": 64},
        {"resource": "memory", "source": "cgroup memory.max", "limit": 4 * GiB, "host": 256 * GiB},
    ]
    assert worker_dict(plain)["resources"]["limits"] == []


def test_requests_text_shows_gpu_memory() -> None:
    r = resources_pb2.ResourceRequest(gpu=2, gpu_memory=20 * GiB)
    assert requests_text(r) == "gpu=2 gpu_memory=20.0 GiB"
