"""``python -m bench reclaim``: reclaim latency, from a tenant's submission to its work starting.

Two tenants, ``ml`` and ``web``, share one cohort of 8 cores on one 8-core worker,
4 cores of quota each. ``web`` borrows all 8 with executions that sleep for
minutes; then ``ml`` submits one execution of one core. Preemption stops ``web``'s
newest (the worker cancels its task and hands it back), and ``ml``'s body starts
on the freed core. A sample is the time from ``ml``'s RunWorkflow call to its body
starting (the body returns ``time.time()``; one machine, one clock). ``ml``'s
execution ends at once; ``web``'s preempted one goes back on the core, and the
next sample starts once ``web`` holds all 8 again.

A real server (default ``--preemption-grace``), a real worker process, over loopback.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import percentiles, write
from flux.client import FluxClient
from flux.security import Credentials
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

SAMPLES = int(os.environ.get("BENCH_RECLAIM_SAMPLES", "30"))
CORES = 8
WORKFLOWS = Path(__file__).with_name("workflows.py")
HELD = (control_pb2.EXECUTION_STATE_SCHEDULED, control_pb2.EXECUTION_STATE_RUNNING)


def _tenant_client(cluster: Cluster, tenant: str) -> FluxClient:
    token = cluster.client.tenants.create_token(tenant)
    return FluxClient(cluster.address, timeout=30, credentials=Credentials(token, cluster.ca))


def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-reclaim-") as workdir:
        cluster = Cluster(Path(workdir), "grpc")
        try:
            cluster.start_server("--no-http")
            cluster.register(WORKFLOWS)
            cluster.start_worker("w1", "--cpus", str(CORES))
            for name in ("ml", "web"):
                cluster.client.tenants.create(name, cpu=CORES // 2, cohort="research")
            ml, web = _tenant_client(cluster, "ml"), _tenant_client(cluster, "web")
            borrowed = [web.run("holds_a_core", 3600).execution_id for _ in range(CORES)]

            def web_holds_all() -> bool:
                return sum(web.get(i).state in HELD for i in borrowed) == CORES

            samples = []
            for _ in range(SAMPLES):
                eventually(web_holds_all, timeout=60, what="web to hold every core again")
                submitted = time.time()
                execution = ml.run("stamp_a_core", wait=True, timeout=60)
                samples.append(float(json.loads(execution.output_json)) - submitted)
            status = cluster.client.status()
            counters = status.counters
            result: dict[str, object] = {
                "samples": SAMPLES,
                "cores": CORES,
                "reclaim_latency_ms": percentiles(samples),
                "preempted": dict(counters.preempted),
                "requeued_preempted": counters.requeued["preempted"],
            }
            for execution_id in borrowed:
                cluster.client.cancel(execution_id)
            ml.close()
            web.close()
        finally:
            cluster.close()
    write("reclaim", result)
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
