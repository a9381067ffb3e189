"""A wait with a timeout rides the client's open RunAndWaitStream call (issue 46), on the blocking
and the asyncio clients, against a real server and a real worker process: the timeout is the
client's to keep (``WaitTimedOut`` on time, naming the execution as it stands), the call stays
open for the runs after it, and the timed-out run's late result is dropped. No ``RunAndWait``
call of its own is made: the stub's method is replaced by one that fails the test.

A server that never answers (a bare grpc server in the test) shows the receipt's own deadline:
the longer of the wait's timeout and the client's call timeout, then ``Unavailable``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from flux import aio
from flux.client import FluxClient, WaitTimedOut
from flux.errors import Unavailable
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

S = control_pb2
# How late a timeout may be raised on a loaded box: generous, only a hang fails.
LATE_BY = 5.0


def _no_unary_wait(stub: Any) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a wait with a timeout took a RunAndWait call of its own")

    stub.RunAndWait = refused


def test_a_blocking_wait_with_a_timeout_rides_the_open_stream(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")
    client = cluster.client
    _no_unary_wait(client._stub)
    first = client.run("echo", 0, wait=True, timeout=30)  # opens the call
    assert first.state == S.EXECUTION_STATE_COMPLETED
    call = client._runs._call
    assert call is not None

    started = time.monotonic()
    with pytest.raises(WaitTimedOut) as timed_out:
        client.run("sleepy", 2.0, wait=True, timeout=0.5)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 0.5 + LATE_BY, waited
    slow = timed_out.value.execution
    assert timed_out.value.timeout == 0.5
    assert slow.execution_id and slow.state in (S.EXECUTION_STATE_SCHEDULED, S.EXECUTION_STATE_RUNNING)

    # The same call serves the next runs, with and without a timeout, while the slow one runs on.
    assert json.loads(client.run("echo", "next", wait=True, timeout=30).output_json)["input"] == "next"
    assert json.loads(client.run("echo", "plain", wait=True).output_json)["input"] == "plain"
    assert client._runs._call is call and not call.ended

    # Its late result is dropped: nobody waits for it, and the call goes on.
    assert client.wait(slow.execution_id, timeout=60).state == S.EXECUTION_STATE_COMPLETED
    eventually(lambda: not call._waiting, what="the call's table empty")
    assert client.run("echo", "after", wait=True, timeout=30).state == S.EXECUTION_STATE_COMPLETED
    assert client._runs._call is call and not call.ended


def test_an_asyncio_wait_with_a_timeout_rides_the_open_stream(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")

    async def main() -> None:
        async with aio.FluxClient(
            cluster.address, timeout=10, credentials=cluster.credentials(Role.CLIENT)
        ) as c:
            _no_unary_wait(c._stub)
            assert (await c.run("echo", 0, wait=True, timeout=30)).state == S.EXECUTION_STATE_COMPLETED
            call, reader = c._runs._call, c._runs._reader
            assert call is not None and reader is not None

            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(WaitTimedOut) as timed_out:
                await c.run("sleepy", 2.0, wait=True, timeout=0.5)
            waited = loop.time() - started
            assert 0.5 <= waited < 0.5 + LATE_BY, waited
            slow = timed_out.value.execution
            assert timed_out.value.timeout == 0.5
            assert slow.state in (S.EXECUTION_STATE_SCHEDULED, S.EXECUTION_STATE_RUNNING)

            # Several runs at once on the same call, some with a timeout, while the slow one runs on.
            finals = await asyncio.gather(
                *(c.run("echo", n, wait=True, timeout=30 if n % 2 else None) for n in range(6))
            )
            assert [json.loads(f.output_json)["input"] for f in finals] == list(range(6))
            assert c._runs._call is call and not reader.done()

            # Its late result is dropped; the call goes on.
            assert (await c.wait(slow.execution_id, timeout=60)).state == S.EXECUTION_STATE_COMPLETED
            while c._runs._waiting:
                await asyncio.sleep(0.01)
            again = await c.run("echo", "after", wait=True, timeout=30)
            assert json.loads(again.output_json)["input"] == "after"
            assert c._runs._call is call and not reader.done()

    asyncio.run(main())


class _Silent(control_pb2_grpc.ControlServiceServicer):
    """Takes every run on RunAndWaitStream and never answers one."""

    def __init__(self) -> None:
        self.runs = 0
        self.stop = threading.Event()

    def RunAndWaitStream(
        self, request_iterator: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        def read() -> None:
            try:
                for _ in request_iterator:
                    self.runs += 1
            except grpc.RpcError:
                pass  # the client left

        threading.Thread(target=read, daemon=True).start()
        self.stop.wait(60)
        return iter(())


@pytest.fixture
def silent() -> Iterator[tuple[str, _Silent]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = _Silent()
    control_pb2_grpc.add_ControlServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        servicer.stop.set()
        server.stop(grace=None)


def test_a_receipt_that_never_comes_waits_the_longer_of_the_timeout_and_the_call_timeout(
    silent: tuple[str, _Silent],
):
    address, servicer = silent
    credentials = Credentials(token="t")
    with FluxClient(address, timeout=1.0, credentials=credentials) as client:
        for timeout, expected in ((0.2, 1.0), (1.5, 1.5)):
            started = time.monotonic()
            with pytest.raises(Unavailable, match="did not answer in time"):
                client.run("echo", 1, wait=True, timeout=timeout)
            waited = time.monotonic() - started
            assert expected <= waited < expected + LATE_BY, (timeout, waited)
        assert servicer.runs == 2  # both on one call

    async def main() -> None:
        async with aio.FluxClient(address, timeout=1.0, credentials=credentials) as c:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(Unavailable, match="did not answer in time"):
                await c.run("echo", 1, wait=True, timeout=0.2)
            assert 1.0 <= loop.time() - started < 1.0 + LATE_BY
            assert not c._runs._waiting

    asyncio.run(main())
