"""``python -m bench limits``: what bounds Flux where it still trails its targets, measured.

Two measurements: a floor with no Flux code in it, and Flux's own burst with one setting moved.

- **transport**: a bare ``grpc.aio`` server in a process of its own, one unary method that
  echoes its request and one bidirectional stream that echoes each message, nothing else (no
  store, no interceptors, no Flux import), polling its sockets as Flux's server does
  (flux/grpc_io.py). ``CALLS`` unary calls from ``CONCURRENCY``
  concurrent callers on one channel, then ``CALLS`` messages on one open stream: the server's
  CPU per call and per message. A RunWorkflow call can cost no less than the first; every
  message of an execution's path (the dispatch, the result, its answer, the final state) no
  less than the second.
- **room per worker**: the peers burst (``python -m bench peers``: 4 worker processes, a task
  that returns its input and declares 1 CPU, ``BURST`` inputs through ``map`` and
  ``wait_all``) with each worker declaring room for 2 executions at once (``--cpus 2
  --capacity 2``, the peers workload), then 4 and 8. The task's body takes microseconds, so
  more room changes nothing but how many executions share each message: it shows what the
  burst costs per message rather than per execution. Room beyond a worker's real CPUs is what
  a prefetching worker would hold (executions waiting at the worker, not yet running), which
  DESIGN §3 does not allow today: reservations are taken at dispatch and no dispatch may
  overcommit a worker.

- **sequential** (bench/limits_sequential.py): one at a time, each hop of Flux's sequential path
  (a submission; a run waited for on the open stream, with and without a timeout) beside the
  bare server's unary call and stream round trip, with the ratio of each to its floor.

Each round runs the transport, then rooms 2, 4 and 8, then the sequential floor and hops; the
summary is the median of ``ROUNDS`` rounds (``LIMITS_ROUNDS``, default 3; ``LIMITS_CALLS`` sets
``CALLS``, default 5,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import psutil

from bench import limits_sequential
from bench.common import speed_s, write
from bench.peers import BURST, LOGICAL_CPUS, TASK, WORKERS

if TYPE_CHECKING:
    from flux.testing import Cluster

# Flux is imported only inside the room measurement: the spawned echo server imports this module,
# and the floor it measures must hold no Flux code.

ROUNDS = int(os.environ.get("LIMITS_ROUNDS", "3"))
CALLS = int(os.environ.get("LIMITS_CALLS", "5000"))
CONCURRENCY = 64
ROOMS = (2, 4, 8)
SERVICE = "bench.Echo"


def _serve(ports: Any) -> None:
    """The bare server (in a spawned process): echo a unary request, echo each message of a stream."""

    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def stream(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    async def main() -> None:
        server = grpc.aio.server()
        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.stream_stream_rpc_method_handler(stream),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ports.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


async def _transport_round(address: str, server: psutil.Process) -> dict[str, float]:
    def cpu() -> float:
        return sum(server.cpu_times()[:2])

    metadata = (("authorization", "Bearer bench"),)  # a header on every call, as Flux's clients send
    async with grpc.aio.insecure_channel(address) as channel:
        unary = channel.unary_unary(f"/{SERVICE}/Unary")
        await unary(b"warm")
        remaining = iter(range(CALLS))

        async def caller() -> None:
            for _ in remaining:
                await unary(b"run", metadata=metadata)

        before, began = cpu(), time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
        unary_seconds, unary_cpu = time.perf_counter() - began, cpu() - before

        call = channel.stream_stream(f"/{SERVICE}/Stream")(metadata=metadata)
        await call.write(b"warm")
        await call.read()
        before, began = cpu(), time.perf_counter()

        async def send() -> None:
            for _ in range(CALLS):
                await call.write(b"run")
            await call.done_writing()

        sender = asyncio.create_task(send())
        for _ in range(CALLS):
            await call.read()
        await sender
        stream_seconds, stream_cpu = time.perf_counter() - began, cpu() - before
    return {
        "unary_calls_per_s": round(CALLS / unary_seconds, 1),
        "unary_server_cpu_ms_per_call": round(1000 * unary_cpu / CALLS, 3),
        "stream_messages_per_s": round(CALLS / stream_seconds, 1),
        "stream_server_cpu_ms_per_message": round(1000 * stream_cpu / CALLS, 3),
    }


@contextlib.contextmanager
def bare_server() -> Iterator[tuple[str, psutil.Process]]:
    """The bare server, freshly spawned (no grpc state shared), its address and its process.

    It polls its sockets as Flux's server does (flux/grpc_io.py: the spawned interpreter reads
    GRPC_EXPERIMENTS from the environment it starts with), so the floor is the same transport.
    """
    from flux import grpc_io  # the name only: this process's grpc is imported already

    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=_serve, args=(ports,), daemon=True)
    ours = grpc_io.VARIABLE not in os.environ  # one already set is the operator's, and passes as is
    if ours:
        os.environ[grpc_io.VARIABLE] = grpc_io.POLLED_BY_COMPLETION_QUEUE
    try:
        process.start()
    finally:
        if ours:
            del os.environ[grpc_io.VARIABLE]
    try:
        port = ports.get(timeout=60)
        yield f"127.0.0.1:{port}", psutil.Process(process.pid)
    finally:
        process.kill()
        process.join()


def transport_round() -> dict[str, float]:
    """One round of the bare-transport floor."""
    with bare_server() as (address, server):
        return asyncio.run(_transport_round(address, server))


def room_round(room: int) -> dict[str, float]:
    """The peers burst with every worker declaring ``room`` CPUs and capacity."""
    from flux.testing import Cluster

    with tempfile.TemporaryDirectory(prefix="limits-") as workdir:
        return _room_burst(Cluster(Path(workdir)), room)


def _room_burst(cluster: Cluster, room: int) -> dict[str, float]:
    from flux.client import FluxClient
    from flux.security import Role

    client = None
    try:
        cluster.start_server("--no-http")
        assert cluster.server is not None
        server = psutil.Process(cluster.server.pid)
        workers = [
            psutil.Process(
                cluster.start_worker(
                    f"w{n}", "--cpus", str(room), "--capacity", str(room), env=LOGICAL_CPUS
                ).pid
            )
            for n in range(WORKERS)
        ]
        client = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
        client.register_file(TASK)
        assert [json.loads(e.output_json) for e in client.map("one_cpu", [1, 2, 3], wait=True)] == [1, 2, 3]

        def cpu(processes: list[psutil.Process]) -> float:
            return sum(sum(p.cpu_times()[:2]) for p in processes)

        inputs = list(range(BURST))
        server_before, workers_before, began = cpu([server]), cpu(workers), time.perf_counter()
        outputs = [json.loads(e.output_json) for e in client.wait_all(client.map("one_cpu", inputs))]
        seconds = time.perf_counter() - began
        assert outputs == inputs
        return {
            "burst_per_s": round(BURST / seconds, 1),
            "server_cpu_ms_per_execution": round(1000 * (cpu([server]) - server_before) / BURST, 3),
            "workers_cpu_ms_per_execution": round(1000 * (cpu(workers) - workers_before) / BURST, 3),
        }
    finally:
        if client is not None:
            client.close()
        cluster.close()


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in rounds), 3) for key in rounds[0]}


def main() -> dict[str, object]:
    transport: list[dict[str, float]] = []
    rooms: dict[int, list[dict[str, float]]] = {room: [] for room in ROOMS}
    sequential: list[dict[str, dict[str, float]]] = []
    speeds = []
    for _ in range(ROUNDS):
        speeds.append(speed_s())
        transport.append(transport_round())
        for room in ROOMS:
            rooms[room].append(room_round(room))
        sequential.append(
            limits_sequential.table(limits_sequential.floor_round(), limits_sequential.flux_round())
        )
    result: dict[str, object] = {
        "rounds": ROUNDS,
        "speed_s_10e7_additions": speeds,
        "transport": {"calls": CALLS, "concurrency": CONCURRENCY, **_medians(transport), "each": transport},
        "room_per_worker": {
            "burst": BURST,
            "workers": WORKERS,
            **{str(room): {**_medians(runs), "each": runs} for room, runs in rooms.items()},
        },
        "sequential": {
            "each_hop": limits_sequential.SEQUENTIAL,
            **{hop: _medians([r[hop] for r in sequential]) for hop in sequential[0]},
            "each": sequential,
        },
        "caveats": [
            "The transport floor runs no Flux code: no store, no interceptors, no dispatcher.",
            "Room beyond 2 is more than the peers workload's CPUs: it stands for executions a worker "
            "would hold waiting (a prefetch), which DESIGN §3 does not allow today.",
        ],
    }
    write("limits", result)
    return result


if __name__ == "__main__":
    main()
