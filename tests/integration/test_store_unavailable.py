"""Errors that are not refusals still leave the servicers through the one error table.

A real ``grpc.aio`` server on loopback, over a dispatcher whose store raises what
psycopg raises while PostgreSQL restarts: callers get UNAVAILABLE (retryable) with
a message that says the database is away, never grpc's UNKNOWN; a fault of the
server's own is INTERNAL.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
import psycopg
import pytest

from flux.security import AuthInterceptor, Tokens
from flux.server.callers import Callers
from flux.server.control_service import ControlService
from flux.server.worker_service import WorkerService
from flux.store.base import StoreError
from flux.store.postgres import PostgresStore
from flux.v1 import control_pb2, control_pb2_grpc, worker_pb2_grpc
from tests.unit.harness import Flux
from tests.unit.memory_store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(20)]


class FailingStore(MemoryStore):
    """Reads fail with ``failure`` while it is set, as a database that went away."""

    unavailable = PostgresStore.unavailable

    def __init__(self) -> None:
        super().__init__()
        self.failure: Exception | None = None

    async def get_execution(self, execution_id: str):  # type: ignore[no-untyped-def]
        if self.failure is not None:
            raise self.failure
        return await super().get_execution(execution_id)

    async def list_executions(self, query):  # type: ignore[no-untyped-def]
        if self.failure is not None:
            raise self.failure
        return await super().list_executions(query)

    async def find_token(self, digest: str):  # type: ignore[no-untyped-def]
        if self.failure is not None:
            raise self.failure
        return await super().find_token(digest)


@pytest.fixture
async def served() -> AsyncIterator[tuple[FailingStore, control_pb2_grpc.ControlServiceStub]]:
    store = FailingStore()
    flux = await Flux(store).start()
    server = grpc.aio.server()
    control_pb2_grpc.add_ControlServiceServicer_to_server(ControlService(flux.d), server)  # type: ignore[arg-type]
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(WorkerService(flux.d), server)  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield store, control_pb2_grpc.ControlServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)
        await flux.d.stop()


async def _code(call) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code(), info.value.details() or ""


async def test_a_database_shutting_down_is_unavailable_not_unknown(
    served: tuple[FailingStore, control_pb2_grpc.ControlServiceStub], caplog: pytest.LogCaptureFixture
) -> None:
    store, control = served
    store.failure = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    with caplog.at_level(logging.WARNING, "flux.server"):
        code, details = await _code(control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1")))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert details == (
        "the database is unavailable (AdminShutdown: terminating connection due to administrator command); retry"
    )
    assert not [r for r in caplog.records if r.exc_info], "a database away is one line, not a traceback"
    store.failure = psycopg.OperationalError("connection refused")  # what the pool says until it is back
    code, details = await _code(control.ListExecutions(control_pb2.ListExecutionsRequest()))
    assert code == grpc.StatusCode.UNAVAILABLE and "connection refused" in details
    store.failure = None
    code, _ = await _code(control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1")))
    assert code == grpc.StatusCode.NOT_FOUND  # back: the same call answers again


async def test_a_store_error_is_unavailable_and_a_bug_is_internal(
    served: tuple[FailingStore, control_pb2_grpc.ControlServiceStub], caplog: pytest.LogCaptureFixture
) -> None:
    store, control = served
    store.failure = StoreError("could not connect to PostgreSQL at postgresql://db/flux")
    code, details = await _code(control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1")))
    assert (code, details) == (
        grpc.StatusCode.UNAVAILABLE,
        "could not connect to PostgreSQL at postgresql://db/flux",
    )
    store.failure = KeyError("worker")  # not the driver's: a fault of the server's own
    with caplog.at_level(logging.ERROR, "flux.server"):
        code, details = await _code(control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1")))
    assert code == grpc.StatusCode.INTERNAL
    assert details == "internal error (KeyError: 'worker'); the server's log has the details"
    assert any(r.exc_info for r in caplog.records), "a bug keeps its traceback in the log"


async def test_a_watch_meets_the_same_table(
    served: tuple[FailingStore, control_pb2_grpc.ControlServiceStub],
) -> None:
    store, control = served
    store.failure = psycopg.errors.AdminShutdown("terminating connection")
    call = control.WatchExecution(control_pb2.WatchExecutionRequest(execution_id="e1"))
    code, details = await _code(call.read())
    assert code == grpc.StatusCode.UNAVAILABLE and "AdminShutdown" in details


async def test_a_tenants_token_checked_while_the_database_is_away_is_unavailable_not_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The interceptor looks a tenant's api token up in the store before any servicer runs: an
    # error there left through grpc itself, as UNKNOWN with a traceback per call.
    store = FailingStore()
    flux = await Flux(store).start()
    tokens = Tokens(worker="w" * 32, api="a" * 32)
    server = grpc.aio.server(interceptors=[AuthInterceptor(tokens, Callers(tokens, flux.d.tenants))])
    control_pb2_grpc.add_ControlServiceServicer_to_server(ControlService(flux.d), server)  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        control = control_pb2_grpc.ControlServiceStub(channel)
        tenant = (("authorization", "Bearer flux_tenant_token_of_someone"),)
        store.failure = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        with caplog.at_level(logging.WARNING):
            code, details = await _code(
                control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1"), metadata=tenant)
            )
        assert code == grpc.StatusCode.UNAVAILABLE
        assert details == (
            "the database is unavailable (AdminShutdown: terminating connection due to administrator command);"
            " retry"
        )
        assert not [r for r in caplog.records if r.exc_info], "a database away is one line, not a traceback"
        store.failure = None
        code, _ = await _code(
            control.GetExecution(control_pb2.GetExecutionRequest(execution_id="e1"), metadata=tenant)
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED  # back: a token never issued is told so
    finally:
        await channel.close()
        await server.stop(None)
        await flux.d.stop()
