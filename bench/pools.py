"""``python -m bench pools`` (or ``python -m bench.pools``): what autoscaling from Flux costs.

Two figures:

- ``push_latency_ms``: from submitting one execution that only an empty pool
  could run to KEDA's ``StreamIsActive`` delivering ``true`` (target <= 50 ms).
  A real server with ``--keda-port`` on loopback; the stream is held by the
  KEDA emulator (flux/testing/keda.py); the execution is cancelled after each
  sample and the ``false`` push awaited before the next, so every sample starts
  from an idle pool. The submission's own RunWorkflow round trip is included.
- ``demand_ms``: one demand computation (``PoolBook.demand_now``: learned
  shapes, merge, ``compute_demand``) over 10,000 pending executions of
  ``SHAPES`` distinct shapes and 100 declared pools, 100 connected workers,
  cold (empty feasibility cache) and warm (the cache a running server holds).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import grpc

from bench.common import percentiles, write
from flux.dispatcher.state.pools import PoolBook
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import Shape, WorkerView
from flux.matching.pools import POOL_LABEL, parse_pools
from flux.testing import Cluster, KedaEmulator, plain

SAMPLES = int(os.environ.get("BENCH_POOLS_SAMPLES", "30"))
PENDING = 10_000
POOLS = 100
SHAPES = int(os.environ.get("BENCH_POOLS_SHAPES", "200"))
REPEAT = int(os.environ.get("BENCH_POOLS_REPEAT", "20"))

WORKFLOW = """
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="needs_gpu", requests=ResourceRequest(gpu=1))
async def needs_gpu(ctx: ExecutionContext[None]):
    return None
"""


def push_latency() -> dict[str, object]:
    samples: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "pool_workflows.py").write_text(WORKFLOW)
        (workdir / "pools.json").write_text(
            json.dumps({"pools": [{"name": "gpu", "resources": {"cpu": 4, "gpu": 1}}]})
        )
        cluster = Cluster(workdir, "grpc")
        try:
            cluster.start_server("--keda-port", "0", "--no-http")
            assert cluster.server is not None and cluster.server.stdout is not None
            line = plain(cluster.server.stdout.readline())
            keda_address = line.rsplit(" on ", 1)[1].split(" ", 1)[0]
            cluster.register(workdir / "pool_workflows.py")
            applied = cluster.flux("pool", "apply", str(workdir / "pools.json"))
            assert applied.returncode == 0, applied.stderr
            with grpc.insecure_channel(keda_address) as channel:
                keda = KedaEmulator(channel, "gpu", lambda replicas: None)
                keda.setup()
                try:
                    keda.wait_push(False)
                    for _ in range(SAMPLES):
                        seen = len(keda.pushes)
                        started = time.monotonic()
                        execution = cluster.client.run("needs_gpu", None, wait=False)
                        push = keda.wait_push(True, after=seen)
                        samples.append(push.at - started)
                        seen = len(keda.pushes)
                        cluster.client.cancel(execution.execution_id)
                        keda.wait_push(False, after=seen)
                finally:
                    keda.close()
        finally:
            cluster.close()
    return {"target_ms": 50, **percentiles(samples)}


class _Entry:
    """What ``PoolBook.demand_now`` reads of a registry entry: ``accepting`` and ``view()``."""

    def __init__(self, view: WorkerView):
        self._view, self.accepting = view, True

    def view(self) -> WorkerView:
        return self._view


def demand_cost() -> dict[str, object]:
    specs = parse_pools(
        [
            {
                "name": f"pool-{i:03d}",
                "labels": {"zone": f"z{i % 5}"},
                "resources": {"cpu": 4 * (1 + i % 8), "memory": f"{16 * (1 + i % 8)}Gi", "gpu": i % 3},
            }
            for i in range(POOLS)
        ]
    )
    # One connected worker per pool (its shape learned too), busy to varying degrees.
    workers = [
        _Entry(
            WorkerView(
                f"w-{i:03d}",
                WorkerResources(
                    cpu_total=spec.cpu,
                    cpu_available=spec.cpu,
                    memory_total=spec.memory,
                    memory_available=spec.memory,
                    gpus=tuple(Gpu(g, memory_total=80 << 30, memory_free=80 << 30) for g in range(spec.gpu)),
                ),
                {**spec.labels, POOL_LABEL: spec.name},
                WorkerSoftware(),
                active=i % 4,
            )
        )
        for i, spec in enumerate(specs)
    ]
    shapes = [
        Shape(
            ResourceRequest(cpu=1 + i % 16, memory=f"{1 + i % 32}Gi", gpu=i % 2),
            {"zone": f"z{i % 5}"} if i % 3 == 0 else None,
        )
        for i in range(SHAPES)
    ]
    per_shape, extra = divmod(PENDING, SHAPES)
    pending = [(shape, per_shape + (1 if i < extra else 0)) for i, shape in enumerate(shapes)]
    assert sum(count for _, count in pending) == PENDING

    def book() -> PoolBook:
        pools = PoolBook(SimpleNamespace(store=None))  # type: ignore[arg-type]
        pools.declared = {spec.name: spec for spec in specs}
        return pools

    cold: list[float] = []
    for _ in range(max(3, REPEAT // 4)):
        pools = book()
        started = time.perf_counter()
        pools.demand_now(workers, pending)  # type: ignore[arg-type]
        cold.append(time.perf_counter() - started)
    pools = book()
    demand = pools.demand_now(workers, pending)  # type: ignore[arg-type]
    warm: list[float] = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        pools.demand_now(workers, pending)  # type: ignore[arg-type]
        warm.append(time.perf_counter() - started)
    return {
        "pending": PENDING,
        "pools": POOLS,
        "shapes": SHAPES,
        "workers": len(workers),
        "counted_pending": sum(d.pending for d in demand.values()),
        "cold_ms": percentiles(cold),
        "warm_ms": percentiles(warm),
    }


def main() -> None:
    write("pools", {"demand_ms": demand_cost(), "push_latency_ms": push_latency()})


if __name__ == "__main__":
    main()
