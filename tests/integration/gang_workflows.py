"""Gang workflows for tests/integration/test_gangs.py: members meet at the leader's address."""

import asyncio
import json
import pathlib
import socket

from flux import ExecutionContext, Gang, ResourceRequest, Retry, workflow


def _exchange(ctx: ExecutionContext, value: int, folder: str) -> dict:
    """Every member sends ``value`` to the leader over TCP at the leader's advertised host; the
    leader answers each with the sum of all. The leader's port (bound to 0) is published in
    ``folder`` under the execution id: the exchange itself goes over the leader's address."""
    gang = ctx.gang
    assert gang is not None
    published = pathlib.Path(folder) / f"{ctx.execution_id}-{ctx.attempt}.port"
    if gang.rank == 0:
        with socket.socket() as server:
            server.bind((gang.leader.address, 0))
            server.listen(gang.size)
            server.settimeout(60)
            published.write_text(str(server.getsockname()[1]))
            peers, total = [], value
            for _ in range(gang.size - 1):
                conn, _ = server.accept()
                conn.settimeout(60)
                total += int(conn.makefile().readline())
                peers.append(conn)
            for conn in peers:
                conn.sendall(f"{total}\n".encode())
                conn.close()
    else:
        for _ in range(600):
            if published.exists() and published.read_text():
                break
            import time

            time.sleep(0.1)
        with socket.create_connection((gang.leader.address, int(published.read_text())), timeout=60) as conn:
            conn.sendall(f"{value}\n".encode())
            total = int(conn.makefile().readline())
    return {
        "rank": gang.rank,
        "size": gang.size,
        "total": total,
        "worker": ctx.worker_name,
        "members": [[m.rank, m.worker, m.address] for m in gang.members],
    }


@workflow.with_options(name="gang_rendezvous", gang=Gang(size=3))
def gang_rendezvous(ctx: ExecutionContext[dict]) -> dict:
    return _exchange(ctx, 10**ctx.gang.rank, ctx.input["folder"])


@workflow.with_options(name="gang_same_rack", gang=Gang(size=2, same="rack"))
def gang_same_rack(ctx: ExecutionContext[dict]) -> dict:
    return {"rank": ctx.gang.rank, "worker": ctx.worker_name}


@workflow.with_options(name="gang_flaky", gang=Gang(size=2), retry=Retry(max_attempts=2, initial_delay=0.1))
async def gang_flaky(ctx: ExecutionContext[dict]) -> dict:
    """Attempt 1: rank 1 fails, while rank 0 would run long; attempt 2 completes."""
    if ctx.attempt == 1:
        if ctx.gang.rank == 1:
            raise RuntimeError("rank 1 fails on attempt 1")
        await asyncio.sleep(120)
    return {"rank": ctx.gang.rank, "attempt": ctx.attempt}


@workflow.with_options(name="gang_sleepy", gang=Gang(size=2))
async def gang_sleepy(ctx: ExecutionContext[dict]) -> dict:
    """Runs long on attempt 1 (its members are lost or cancelled meanwhile); quick after."""
    marker = pathlib.Path(ctx.input["folder"]) / f"{ctx.worker_name}.{ctx.attempt}.started"
    marker.write_text(json.dumps(ctx.gang.rank))
    if ctx.attempt == 1:
        await asyncio.sleep(120)
    return {"rank": ctx.gang.rank, "attempt": ctx.attempt}


@workflow.with_options(name="gang_cores", requests=ResourceRequest(cpu=2), gang=Gang(size=2))
async def gang_cores(ctx: ExecutionContext[float]) -> int:
    """Two members of 2 cores each, running ``ctx.input`` seconds."""
    await asyncio.sleep(ctx.input)
    return ctx.gang.rank


@workflow.with_options(name="two_cores", requests=ResourceRequest(cpu=2))
async def two_cores(ctx: ExecutionContext[float]) -> str:
    await asyncio.sleep(ctx.input)
    return ctx.worker_name


@workflow.with_options(name="gang_echo", gang=Gang(size=2))
async def gang_echo(ctx: ExecutionContext[object]) -> dict:
    return {"rank": ctx.gang.rank, "input": ctx.input}


@workflow.with_options(name="gang_nap", gang=Gang(size=2))
async def gang_nap(ctx: ExecutionContext[float]) -> dict:
    await asyncio.sleep(ctx.input)
    return {"rank": ctx.gang.rank, "attempt": ctx.attempt}
