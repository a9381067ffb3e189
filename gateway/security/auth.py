"""Authentication from the request head, before a single body byte is read.

The core stays the authority (every call still carries the caller's
``authorization``), but waiting for the route to run would mean reading and
decoding the whole body first: an anonymous caller could make the server parse
16 MiB of JSON, on the loop the gRPC core shares, just to be told 401. So this
middleware looks at the headers only: the bearer token (scheme in any case,
as RFC 9110 says) and, on worker routes, the session token.

The gateway holds no tokens (it may run in another process than the core), so
a token it has not seen is checked by a probe: a call the core's auth
interceptor refuses when the token is wrong and that otherwise costs nothing
(an empty execution id or worker name, refused before any store access). Each
answer is remembered for a while, by a hash of the token, in a bounded table.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from fastapi.security import HTTPBearer
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from flux.errors import FluxError, PermissionDenied, Unauthenticated
from flux.security import Role
from flux.v1 import control_pb2, worker_pb2
from gateway.core import Core
from gateway.security.tickets import ticket_in
from gateway.wire import error_response, from_rpc

SESSION_HEADER = "X-Flux-Session"
# Generated tokens are 44 characters; one this long cannot be any server's (and would not fit in gRPC metadata).
MAX_TOKEN_CHARS = 4096
# How long a probe's answer is trusted. The core checks every call anyway, so a token revoked
# by a restart is refused there at once; this only spares the probe.
ACCEPTED_FOR = 30.0
REFUSED_FOR = 5.0
REMEMBERED = 4096
PROBE_TIMEOUT = 5.0

# The two bearer schemes as OpenAPI shows them (securitySchemes); the middleware does the checking.
WORKER_BEARER = HTTPBearer(
    scheme_name="workerToken",
    description="the worker join token (FLUX_WORKER_TOKEN, ./.flux/worker.token)",
    auto_error=False,
)
API_BEARER = HTTPBearer(
    scheme_name="apiToken",
    description="the client API token (FLUX_API_TOKEN, ./.flux/api.token)",
    auto_error=False,
)


@dataclass(frozen=True, slots=True)
class Guard:
    """What a route asks of its caller's headers."""

    # None: either token (POST /tickets mints for a worker's stream or for a client's).
    role: Role | None
    # Worker routes after register also need the session token, in its header (an EventSource,
    # which cannot set it, opens /connect with a ticket instead).
    session: bool = False
    # A stream that also opens with ?ticket= (gateway.security.tickets): a request that brings a ticket and
    # no authorization header is left to the route, which redeems the ticket before any body.
    ticket: bool = False


def bearer_token(value: str | None) -> str | None:
    """The token of ``Bearer <token>`` with the scheme in any case; None when there is no bearer token."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class TokenCache:
    """Probe answers by (role, sha256 of the token): None for accepted, else the refusal."""

    def __init__(self, size: int = REMEMBERED, clock=time.monotonic):  # type: ignore[no-untyped-def]
        self._answers: OrderedDict[tuple[Role, bytes], tuple[float, FluxError | None]] = OrderedDict()
        self._size, self._clock = size, clock

    def get(self, role: Role, token: str) -> tuple[bool, FluxError | None]:
        key = (role, hashlib.sha256(token.encode()).digest())
        found = self._answers.get(key)
        if found is None or found[0] < self._clock():
            return False, None
        return True, found[1]

    def put(self, role: Role, token: str, refusal: FluxError | None, ttl: float) -> None:
        key = (role, hashlib.sha256(token.encode()).digest())
        self._answers[key] = (self._clock() + ttl, refusal)
        self._answers.move_to_end(key)
        while len(self._answers) > self._size:
            self._answers.popitem(last=False)


async def probe(core: Core, role: Role, token: str) -> tuple[FluxError | None, float]:
    """What the core says of ``token`` for ``role`` (None when it lets the call through), and for how long."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    try:
        if role is Role.WORKER:
            await core.workers.GetWorkflowSource(
                worker_pb2.GetWorkflowSourceRequest(), metadata=metadata, timeout=PROBE_TIMEOUT
            )
        else:
            await core.control.GetExecution(
                control_pb2.GetExecutionRequest(), metadata=metadata, timeout=PROBE_TIMEOUT
            )
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            return from_rpc(exc), REFUSED_FOR
        if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
            # The core's text names the probe's rpc, which the caller never called; see _check.
            return PermissionDenied(""), REFUSED_FOR
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return None, REFUSED_FOR  # see below; and soon asked again, in case it was the core that was down
    # Anything else got past the interceptor: the empty name or id is refused, or (auth off) answered.
    # UNAVAILABLE too: a replica answers it for a worker it does not hold, and when the core is
    # really unreachable the route's own call says so (the core still checks the token there).
    return None, ACCEPTED_FOR


class HeaderAuth:
    """Pure ASGI: refuses a request on its headers alone, and normalises ``authorization`` for the core."""

    def __init__(self, app: ASGIApp, guards: Sequence[tuple[BaseRoute, Guard]]):
        self.app, self.guards, self.cache = app, list(guards), TokenCache()

    def _guard(self, scope: Scope) -> Guard | None:
        for route, guard in self.guards:
            if route.matches(scope)[0] is Match.FULL:
                return guard
        return None  # open routes, unknown paths and wrong methods: the app answers those

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = self._guard(scope) if scope["type"] == "http" else None
        if guard is None:
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        raw = next((value for name, value in headers if name == b"authorization"), None)
        if guard.ticket:
            try:
                # The route reads it with the same parser (tickets.access_for): both see one ticket.
                ticket = ticket_in(scope.get("query_string", b""))
            except FluxError as refusal:
                await error_response(refusal)(scope, receive, send)
                return
            if raw is None and ticket is not None:
                await self.app(scope, receive, send)
                return
        try:
            token = await self._check(scope, guard, raw)
        except FluxError as refusal:
            await error_response(refusal)(scope, receive, send)
            return
        if token:
            # The core compares "Bearer " exactly; send it the canonical form of what was accepted.
            value = f"Bearer {token}".encode()
            scope = {**scope, "headers": [(n, v) for n, v in headers if n != b"authorization"]}
            scope["headers"].append((b"authorization", value))
        await self.app(scope, receive, send)

    async def _check(self, scope: Scope, guard: Guard, raw: bytes | None) -> str:
        found = bearer_token(raw.decode("latin-1")) if raw is not None else ""
        token = found or ""
        if found and (len(found) > MAX_TOKEN_CHARS or not found.isascii() or not found.isprintable()):
            raise Unauthenticated(f"invalid {guard.role.value if guard.role else 'api or worker'} token")
        if guard.role is None:
            return await self._either(scope, token, found)
        refusal = await self._verdict(scope, guard.role, token)
        if refusal is not None and found is None:
            # Say what is wrong with the header rather than calling the credentials missing.
            raise Unauthenticated(f"the authorization header is not 'Bearer <{guard.role.value} token>'")
        if isinstance(refusal, PermissionDenied):
            other = Role.CLIENT if guard.role is Role.WORKER else Role.WORKER
            route = f"{scope['method']} {scope['path']}"[:200]
            raise PermissionDenied(
                f"the {other.value} token cannot call {route}; use the {guard.role.value} token"
            )
        if refusal is not None:
            raise type(refusal)(str(refusal))  # a fresh exception per request: no shared traceback
        if guard.session and not _has_session(scope):
            raise Unauthenticated(
                f"the {SESSION_HEADER} header is missing; send the token POST /workers/register returned"
            )
        return token

    async def _either(self, scope: Scope, token: str, found: str | None) -> str:
        """Either token will do; the route then checks that it fits what is asked for."""
        refusal = await self._verdict(scope, Role.CLIENT, token)
        if isinstance(refusal, PermissionDenied):
            refusal = await self._verdict(scope, Role.WORKER, token)
        if refusal is None:
            return token
        if found is None:
            raise Unauthenticated("the authorization header is not 'Bearer <api or worker token>'")
        raise type(refusal)(str(refusal) or "this token is neither the api nor the worker token")

    async def _verdict(self, scope: Scope, role: Role, token: str) -> FluxError | None:
        """The core's answer for ``token`` (remembered for a while): None when it may call."""
        known, refusal = self.cache.get(role, token)
        if not known:
            refusal, ttl = await probe(scope["app"].state.core, role, token)
            self.cache.put(role, token, refusal, ttl)
        return refusal


def _has_session(scope: Scope) -> bool:
    return any(name == SESSION_HEADER.lower().encode() and value for name, value in scope["headers"])
