"""``python -m bench starvation``: a ``cpu=4`` execution under a saturating ``cpu=1`` stream.

Issue 16: young small work can keep taking the room an old big execution
needs for ever. This starts one real server and one real worker process
advertising 4 cores, feeds it ``cpu=1`` executions (each sleeps ``WORK``
seconds) faster than 4 cores get through them, submits one ``cpu=4``
execution of the lowest priority once the stream is running, and measures
how long it waits to start:

- ``aging``: ``--starvation-after AFTER``. Expected within ``AFTER`` plus the
  time the work already running on the nominated worker needs to end
  (``WORK``) and one scheduling pass.
- ``off``: ``--starvation-after 0``. Expected never within ``BOUND`` seconds:
  the stream always has a one-core execution waiting for the next free core.

The worker is told there is no foreign CPU load (``FLUX_SIMULATED_CPU_BUSY=0``):
this box is shared, and other tenants' load would decide whether 4 cores ever
look free, which is not what is under test. Everything else is real processes
on loopback.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

from bench.common import write
from flux.client import WaitTimedOut
from flux.testing import Cluster
from flux.v1 import control_pb2

AFTER = float(os.environ.get("BENCH_STARVATION_AFTER", "3"))
BOUND = float(os.environ.get("BENCH_STARVATION_BOUND", "30"))
WORK = float(os.environ.get("BENCH_STARVATION_WORK", "1.0"))
# Submissions per second: twice what 4 cores get through, so a backlog always waits.
RATE = 2 * 4 / WORK
WARMUP = 2.0

WORKFLOW = """
import asyncio
import time
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="one_core", requests=ResourceRequest(cpu=1))
async def one_core(ctx: ExecutionContext[float]):
    await asyncio.sleep(ctx.input)
    return None


@workflow.with_options(name="four_cores", requests=ResourceRequest(cpu=4), priority=-1000)
async def four_cores(ctx: ExecutionContext[None]):
    return time.time()
"""


def run_mode(workdir: Path, after: float) -> dict[str, object]:
    cluster = Cluster(workdir)
    stop = threading.Event()
    submitted: list[str] = []
    try:
        cluster.start_server("--starvation-after", str(after))
        cluster.register(workdir / "starvation_workflows.py")
        os.environ["FLUX_SIMULATED_CPU_BUSY"] = "0"
        try:
            cluster.start_worker("four", "--cpus", "4", "--capacity", "16")
        finally:
            del os.environ["FLUX_SIMULATED_CPU_BUSY"]

        def stream() -> None:
            with cluster.client_for(cluster.address) as feeder:
                began = time.monotonic()
                while not stop.is_set():
                    due = int((time.monotonic() - began) * RATE) + 1
                    while len(submitted) < due:
                        submitted.append(feeder.run("one_core", WORK).execution_id)
                    stop.wait(0.02)

        feeder = threading.Thread(target=stream, daemon=True)
        feeder.start()
        time.sleep(WARMUP)
        submit_at = time.time()
        big = cluster.client.run("four_cores", None).execution_id
        try:
            final = cluster.client.wait(big, timeout=BOUND)
            started = json.loads(final.output_json)
        except WaitTimedOut:
            final, started = cluster.client.get(big), None
        backlog = sum(
            cluster.client.get(i).state == control_pb2.EXECUTION_STATE_CREATED for i in list(submitted)
        )
        stop.set()
        feeder.join(timeout=10)
        return {
            "starvation_after_s": after,
            "placed_after_s": None if started is None else round(started - submit_at, 3),
            "final_state": control_pb2.ExecutionState.Name(final.state),
            "one_core_submitted": len(submitted),
            "one_core_waiting_at_end": backlog,
        }
    finally:
        stop.set()
        cluster.close()


def main() -> None:
    results = {}
    for mode, after in (("aging", AFTER), ("off", 0.0)):
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            (workdir / "starvation_workflows.py").write_text(WORKFLOW)
            results[mode] = run_mode(workdir, after)
    write(
        "starvation",
        {
            "scenario": (
                f"one worker --cpus 4; cpu=1 executions of {WORK:g} s submitted at {RATE:g}/s; "
                "one cpu=4 execution (priority -1000) submitted after the stream starts"
            ),
            "bound_s": BOUND,
            "expected_aging_within_s": AFTER + WORK,
            **results,
        },
    )


if __name__ == "__main__":
    main()
