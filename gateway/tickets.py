"""Stream tickets: how code that cannot set headers (a browser's EventSource) opens a stream.

A ticket is minted with the proper credentials in headers (``POST /tickets``)
and passed in the stream's URL as ``?ticket=``. It is bound to the one stream
it opens (one worker's ``/connect``, one execution's events, or the fleet
feed), lives a few seconds, and opens one stream only. The long-lived token
never goes in a URL, where proxies and browser histories would keep it.

The gateway keeps the minted tickets, with the credentials they stand for, in
memory: a ticket opens a stream at the gateway that minted it. Only a hash of
each ticket is kept, and spent or expired ones are remembered a while longer
so a refusal can say which it was.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

import grpc
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from flux.errors import InvalidArgument, PermissionDenied, ResourceExhausted, Unauthenticated
from flux.v1 import control_pb2, worker_pb2
from gateway import schema

# Seconds a ticket may wait before it opens its stream: enough for a page to pass it on.
DEFAULT_TTL = 30.0
# Tickets (live or remembered) one gateway holds before minting answers 429.
MAX_TICKETS = 10_000
# Spent and expired tickets are remembered this many TTLs past their expiry.
REMEMBER_TTLS = 10

TicketParam = Annotated[
    str | None,
    Query(
        max_length=128,
        description="a stream ticket from POST /tickets, for clients that cannot set headers (EventSource)",
    ),
]


def worker_scope(name: str) -> str:
    return f"worker:{name}"


def execution_scope(execution_id: str) -> str:
    return f"execution:{execution_id}"


FLEET_SCOPE = "fleet"


@dataclass(frozen=True, slots=True)
class Access:
    """The credentials a stream opens with: from the request's headers, or from a ticket."""

    authorization: str | None
    session_token: str | None = None


@dataclass(slots=True)
class _Ticket:
    scope: str
    access: Access
    expires_at: float
    used: bool = False


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


class TicketBook:
    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._tickets: dict[str, _Ticket] = {}

    def __len__(self) -> int:
        return len(self._tickets)

    def mint(self, scope: str, access: Access) -> str:
        now = self.clock()
        self._purge(now)
        if len(self._tickets) >= MAX_TICKETS:
            raise ResourceExhausted(
                f"this gateway holds {MAX_TICKETS} unexpired tickets; retry in {self.ttl:g}s"
            )
        ticket = secrets.token_urlsafe(32)
        self._tickets[_digest(ticket)] = _Ticket(scope, access, now + self.ttl)
        return ticket

    def redeem(self, ticket: str, scope: str) -> Access:
        """The credentials of ``ticket`` for ``scope``, spending it; or the reason it opens nothing."""
        found = self._tickets.get(_digest(ticket))
        now = self.clock()
        if found is None:
            raise Unauthenticated("the ticket is unknown to this gateway; mint one with POST /tickets")
        if found.used:
            raise Unauthenticated("the ticket was already used (a ticket opens one stream); mint a new one")
        if now >= found.expires_at:
            raise Unauthenticated(
                f"the ticket expired {now - found.expires_at:.0f}s ago (tickets live {self.ttl:g}s); "
                "mint a new one"
            )
        if found.scope != scope:
            # Not spent: the holder may still open the stream it was minted for.
            raise PermissionDenied(f"the ticket is for {found.scope}, not {scope}")
        found.used = True
        return found.access

    def _purge(self, now: float) -> None:
        forget_before = now - self.ttl * REMEMBER_TTLS
        stale = [key for key, t in self._tickets.items() if t.expires_at < forget_before]
        for key in stale:
            del self._tickets[key]


def scope_of(body_scope: str, worker: str, execution_id: str) -> str:
    """The scope a mint request names, or a refusal naming the field that is wrong."""
    if body_scope == "worker":
        if not worker:
            raise InvalidArgument("worker is required with scope 'worker': the name the ticket connects")
        return worker_scope(worker)
    if body_scope == "execution":
        if not execution_id:
            raise InvalidArgument(
                "execution_id is required with scope 'execution': the execution whose events it opens"
            )
        return execution_scope(execution_id)
    if body_scope == "fleet":
        return FLEET_SCOPE
    raise InvalidArgument(f"scope must be one of worker, execution, fleet; got {body_scope!r}")


def book(request: Request) -> TicketBook:
    return request.app.state.tickets


def access_for(request: Request, scope: str, ticket: str | None) -> Access:
    """The headers' credentials, or, when ``?ticket=`` is given, the ticket's for ``scope``."""
    if ticket:
        return book(request).redeem(ticket, scope)
    return Access(request.headers.get("authorization"), request.headers.get("x-flux-session"))


router = APIRouter(tags=["streams"])

_PATHS = {
    "worker": "/workers/{worker}/connect",
    "execution": "/executions/{execution_id}/events",
    "fleet": "/events",
}


@router.post(
    "/tickets",
    response_model=schema.TicketResponse,
    responses=schema.refusals(
        {
            401: "no credentials, or they are not valid",
            403: "these credentials cannot open that stream",
            404: "unknown execution",
            422: "invalid body",
            413: "too many unexpired tickets on this gateway (RESOURCE_EXHAUSTED)",
            503: "the core is unreachable",
        }
    ),
)
async def mint(body: schema.TicketRequest, request: Request) -> JSONResponse:
    """A single-use ticket that opens one stream as `?ticket=`, for clients that cannot set headers.

    Send the credentials the stream itself needs: for `worker`, the worker token (`Authorization`)
    and the session token (`X-Flux-Session`); for `execution` and `fleet`, the API token. The ticket
    expires after `expires_in_s` seconds, opens one stream, and only at this gateway.
    """
    scope = scope_of(body.scope, body.worker, body.execution_id)
    access = Access(request.headers.get("authorization"), request.headers.get("x-flux-session"))
    core = request.app.state.core.for_caller(access.authorization)
    timeout = request.app.state.settings.unary_timeout
    if body.scope == "worker":
        if not access.authorization or not access.session_token:
            raise Unauthenticated(
                "a worker ticket needs the worker token (Authorization: Bearer …) and the session "
                "token from POST /workers/register (X-Flux-Session)"
            )
        # GetWorkflowSource checks the worker token and the name's session before anything
        # else; an empty hash then fails as INVALID_ARGUMENT, which means both were good.
        check = worker_pb2.GetWorkflowSourceRequest(name=body.worker, session_token=access.session_token)
        try:
            await core.workers.GetWorkflowSource(check, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise
    elif body.scope == "execution":
        # Checks the API token and that the execution exists, so the ticket can open its stream.
        await core.control.GetExecution(
            control_pb2.GetExecutionRequest(execution_id=body.execution_id), timeout=timeout
        )
    else:
        # One worker is enough to check the token: not the whole fleet.
        await core.control.ListWorkers(control_pb2.ListWorkersRequest(page_size=1), timeout=timeout)
    tickets = book(request)
    ticket = tickets.mint(scope, access)
    path = _PATHS[body.scope].format(
        worker=quote(body.worker, safe=""), execution_id=quote(body.execution_id, safe="")
    )
    return JSONResponse(
        {"ticket": ticket, "scope": scope, "expires_in_s": tickets.ttl, "url": f"{path}?ticket={ticket}"}
    )
