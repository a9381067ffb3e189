"""The worker's HTTP transport: the gateway's routes, with dispatch read as Server-Sent Events.

It speaks the same domain terms as ``GrpcTransport``, so the runtime cannot
tell them apart. HTTP refusals come back as the ``flux.errors`` type the
gateway's table gave them: the body's ``code`` (a gRPC status name) decides,
the HTTP status is the fallback, and anything that means "try later" (5xx, a
dropped or timed-out connection) is ``Unavailable``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from flux.domain.execution import ExecutionError
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import (
    STATUS,
    FailedPrecondition,
    FluxError,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unimplemented,
    from_grpc_code,
)
from flux.security import Credentials
from flux.v1 import worker_pb2
from flux.worker.grpc_transport import (
    complete_batch_request,
    complete_request,
    connected_from_proto,
    dispatch_from_proto,
)
from flux.worker.sse_decoder import SseDecodeError, SseDecoder
from flux.worker.transport import (
    Answers,
    Cancel,
    Heartbeat,
    Outcome,
    Registration,
    WorkerEvent,
    WorkerTransport,
    answers_from,
)

M = TypeVar("M", bound=Message)

log = logging.getLogger("flux.worker.http")

SESSION_HEADER = "X-Flux-Session"
UNARY_TIMEOUT = aiohttp.ClientTimeout(total=30.0, sock_connect=5.0)
# The gateway pings an idle stream every 15 s by default; four silent intervals mean it is gone.
STREAM_IDLE_TIMEOUT = 60.0
# Calls in flight at once, each on a keep-alive connection of the pool; the dispatch stream
# has a connection of its own beyond these. aiohttp (its HTTP parser is C) costs a third of
# httpx's client CPU per call: 0.35-0.7 ms against 1.2-1.9 ms for a claim on this 2-core box.
IN_FLIGHT = 3
POOL_CONNECTIONS = IN_FLIGHT + 2
# What counts as "the gateway cannot be reached": refused, reset, cut off, timed out, bad TLS.
_UNREACHABLE = (aiohttp.ClientError, TimeoutError)

# HTTP status -> error, for answers without a usable body (409 is ambiguous; the body says which).
_BY_HTTP_STATUS: dict[int, type[FluxError]] = {}
for _error, (_, _status) in STATUS.items():
    _BY_HTTP_STATUS.setdefault(_status, _error)
_BY_HTTP_STATUS[409] = FailedPrecondition


def error_from_response(status: int, body: bytes) -> FluxError:
    code, message = "", ""
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail.get("code", "")), str(detail.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        message = body[:200].decode(errors="replace")
    message = message or f"HTTP {status}"
    if status >= 500:
        return Unavailable(f"the gateway answered {status}: {message}")
    if code in grpc.StatusCode.__members__:
        return from_grpc_code(grpc.StatusCode[code], message)
    return _BY_HTTP_STATUS.get(status, InvalidArgument)(message)


def _body(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _parse(data: str, message: M) -> M:
    # Fields a newer gateway adds are ignored, as the binary protocol would.
    return json_format.Parse(data, message, ignore_unknown_fields=True)


def _event(kind: str, data: str) -> WorkerEvent | None:
    if kind == "execution_scheduled":
        return dispatch_from_proto(_parse(data, worker_pb2.ExecutionScheduled()))
    if kind == "execution_cancelled":
        c = _parse(data, worker_pb2.ExecutionCancelled())
        return Cancel(c.execution_id, c.generation, c.reason, c.preempted)
    if kind == "connected":
        # The HTTP routes take no claim inside a result, whatever the core behind the gateway does.
        return replace(connected_from_proto(_parse(data, worker_pb2.Connected())), claims_with_results=False)
    if kind == "ping":
        return Heartbeat()
    return None  # an event this worker does not know yet


class SseTransport(WorkerTransport):
    name = "sse"

    def __init__(
        self,
        gateways: Sequence[str],
        stream_idle_timeout: float = STREAM_IDLE_TIMEOUT,
        credentials: Credentials | None = None,
    ):
        urls = [g.rstrip("/") for g in gateways if g]
        if not urls:
            raise InvalidArgument("--gateway needs at least one URL, e.g. http://127.0.0.1:8080")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise InvalidArgument(f"--gateway {url!r} is not an http:// or https:// URL")
        self._urls = urls
        self.credentials = credentials or Credentials()
        self._index = 0
        self._idle = stream_idle_timeout
        self._client: aiohttp.ClientSession | None = None
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)

    @property
    def url(self) -> str:
        return self._urls[self._index]

    def rotate(self) -> None:
        """Move to the next gateway (after a failed connection)."""
        if len(self._urls) > 1:
            self._index = (self._index + 1) % len(self._urls)
            if self._client is not None:
                client, self._client = self._client, None
                asyncio.get_running_loop().create_task(client.close())

    @property
    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            tls: ssl.SSLContext | bool = (
                ssl.create_default_context(cafile=self.credentials.ca) if self.credentials.ca else True
            )
            # No proxies from the environment (trust_env is off): the gateway is named explicitly.
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=POOL_CONNECTIONS, ssl=tls),
                timeout=UNARY_TIMEOUT,
                headers=self.credentials.headers,  # the worker join token, on every request
                trust_env=False,
            )
        return self._client

    async def _request(self, method: str, path: str, body: Any = None, token: str = "") -> tuple[int, bytes]:
        """The status and body of one call to the gateway; ``Unavailable`` when it cannot be reached."""
        headers = {SESSION_HEADER: token} if token else None
        try:
            async with (
                self._in_flight,
                self.client.request(method, self.url + path, json=body, headers=headers) as response,
            ):
                content = await response.read()
        except _UNREACHABLE as exc:
            raise Unavailable(f"cannot reach the gateway at {self.url}: {exc!r}") from exc
        if log.isEnabledFor(logging.DEBUG):  # one line per call: chatter, shown only at DEBUG
            log.debug(
                'HTTP Request: %s %s%s "%d %s"', method, self.url, path, response.status, response.reason
            )
        return response.status, content

    async def _post(self, path: str, body: Any, token: str = "") -> Any:
        status, content = await self._request("POST", path, body, token)
        if status >= 300:
            raise error_from_response(status, content)
        try:
            return json.loads(content)
        except ValueError as exc:  # something between us and the gateway answered instead
            raise Unavailable(f"{self.url}{path} answered {status} without JSON") from exc

    @staticmethod
    def _worker(name: str) -> str:
        return f"/workers/{quote(name, safe='')}"

    async def register(self, registration: Registration) -> str:
        message = worker_pb2.RegisterRequest(
            name=registration.name,
            resources=registration.resources.to_proto(),
            software=registration.software.to_proto(),
            labels=registration.labels,
            capacity=registration.capacity,
            prefetch=registration.prefetch,
            session_token=registration.session_token,
            advertise_address=registration.advertise_address,
        )
        answer = await self._post("/workers/register", _body(message))
        return str(answer["session_token"])

    async def connect(self, name: str, session_token: str) -> AsyncIterator[WorkerEvent]:
        # No total: the stream lasts. A read that waits longer than the idle timeout means it is gone.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=UNARY_TIMEOUT.sock_connect, sock_read=self._idle
        )
        headers = {SESSION_HEADER: session_token, "Accept": "text/event-stream"}
        url = f"{self.url}{self._worker(name)}/connect"
        try:
            async with self.client.get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    raise error_from_response(response.status, await response.read())
                if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                    raise Unavailable(f"{url} answered {response.content_type}, not an event stream")
                decoder = SseDecoder()
                async for chunk in response.content.iter_any():
                    for sse in decoder.feed(chunk):
                        try:
                            event = _event(sse.event, sse.data)
                        except json_format.ParseError as exc:
                            raise Unavailable(
                                f"the gateway sent a malformed {sse.event} event: {exc}"
                            ) from exc
                        if event is not None:
                            yield event
        except (*_UNREACHABLE, SseDecodeError) as exc:
            raise Unavailable(f"dispatch stream from {self.url} failed: {exc!r}") from exc

    async def report(
        self,
        name: str,
        token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None:
        message = worker_pb2.ReportResourcesRequest(
            resources=resources.to_proto(),
            software=software.to_proto() if software is not None else None,
            draining=draining,
        )
        await self._post(f"{self._worker(name)}/resources", _body(message), token)

    async def claim(self, name: str, token: str, execution_id: str, generation: int) -> None:
        path = f"{self._worker(name)}/claim/{quote(execution_id, safe='')}"
        await self._post(path, {"generation": generation}, token)

    async def complete(
        self,
        name: str,
        token: str,
        execution_id: str,
        generation: int,
        output_json: str | None,
        error: ExecutionError | None,
        resources: WorkerResources | None,
    ) -> None:
        message = complete_request(generation, output_json, error, resources)
        path = f"{self._worker(name)}/complete/{quote(execution_id, safe='')}"
        await self._post(path, _body(message), token)

    async def _batch(self, path: str, body: list[dict[str, Any]], token: str) -> Answers:
        try:
            answers = await self._post(path, body, token)
        except NotFound as exc:  # a gateway from before the batched routes: no such route
            raise Unimplemented(f"{self.url}{path}: {exc}") from exc
        if not isinstance(answers, list):
            raise Unavailable(f"{self.url}{path} answered {type(answers).__name__}, not a list of answers")
        return answers_from(
            len(body),
            [
                (bool(a.get("ok")), str(a.get("code", "")), str(a.get("message", "")))
                for a in answers
                if isinstance(a, dict)
            ],
        )

    async def claim_batch(
        self,
        name: str,
        token: str,
        items: Sequence[tuple[str, int]],
        on_written: Callable[[], None] | None = None,
    ) -> Answers:
        # Never ``on_written``: each POST is its own request, and the gateway may answer them in any order.
        body = [{"execution_id": i, "generation": g} for i, g in items]
        return await self._batch(f"{self._worker(name)}/claims", body, token)

    async def complete_batch(
        self, name: str, token: str, items: Sequence[Outcome], resources: WorkerResources | None
    ) -> Answers:
        message = complete_batch_request(items, None)
        body = [_body(item) for item in message.items]
        if resources is not None:  # one report for the batch: the routes take the last item's
            body[-1]["resources"] = _body(resources.to_proto())
        return await self._batch(f"{self._worker(name)}/completions", body, token)

    async def release(self, name: str, token: str, execution_id: str, generation: int, reason: str) -> None:
        path = f"{self._worker(name)}/release/{quote(execution_id, safe='')}"
        await self._post(path, {"generation": generation, "reason": reason}, token)

    async def heartbeat(
        self, name: str, token: str, execution_id: str, generation: int, details_json: str
    ) -> None:
        path = f"{self._worker(name)}/heartbeat/{quote(execution_id, safe='')}"
        await self._post(path, {"generation": generation, "details_json": details_json}, token)

    async def get_source(self, name: str, token: str, source_hash: str) -> tuple[str, str]:
        path = f"{self._worker(name)}/source/{quote(source_hash, safe='')}"
        status, content = await self._request("GET", path, token=token)
        if status != 200:
            raise error_from_response(status, content)
        try:
            source = json_format.ParseDict(
                json.loads(content), worker_pb2.WorkflowSource(), ignore_unknown_fields=True
            )
        except (ValueError, json_format.ParseError) as exc:
            raise Unavailable(f"{self.url}{path} answered {status} without a workflow source") from exc
        return source.filename, source.source

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
