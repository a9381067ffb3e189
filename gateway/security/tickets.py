"""Stream tickets: how code that cannot set headers (a browser's EventSource) opens a stream.

A ticket is minted with the proper credentials in headers (``POST /tickets``)
and passed in the stream's URL as ``?ticket=``. It is bound to the one stream
it opens (one worker's ``/connect``, one execution's events, or the fleet
feed), lives a few seconds, and opens one stream only. The long-lived token
never goes in a URL, where proxies and browser histories would keep it.

The gateway keeps the minted tickets, with the credentials they stand for, in
memory: a ticket opens a stream at the gateway that minted it. Only a hash of
each ticket is kept. Only live tickets (minted, unspent, unexpired) count
against the gateway's cap and the per-credential cap; spent and expired ones
are remembered apart, in a bounded table, so a refusal can say which it was.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote

import grpc
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from flux.errors import InvalidArgument, PermissionDenied, ResourceExhausted, Unauthenticated
from flux.v1 import control_pb2, worker_pb2
from gateway.wire import schema

# Seconds a ticket may wait before it opens its stream: enough for a page to pass it on.
DEFAULT_TTL = 30.0
# Live tickets (minted, unspent, unexpired) one gateway holds before minting is refused ...
MAX_TICKETS = 10_000
# ... and one credential (one token, or one worker session) holds, so one caller cannot take them all.
MAX_TICKETS_PER_CREDENTIAL = 1_000
# Spent and expired tickets are remembered (so a refusal can say which it was) this many TTLs past
# their expiry, and at most this many of them: they never count against the caps above.
REMEMBER_TTLS = 10
MAX_REMEMBERED = 10_000
# What POST /tickets mints (secrets.token_urlsafe of 32 bytes is 43 characters), with room to spare.
TICKET_FORM = re.compile(r"[A-Za-z0-9_-]{1,128}")


def ticket_in(query_string: bytes) -> str | None:
    """The ``?ticket=`` of a query string; None when there is none.

    The one parser of it: the auth middleware (which lets a ticket stand in for the headers) and
    the route (which redeems it) must agree on which ticket a request brings, so both call this.
    A repeated, empty or malformed ticket is refused, never read one way here and another there.
    """
    values = [
        v for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True) if k == "ticket"
    ]
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated("?ticket= is given more than once; give one ticket")
    if not TICKET_FORM.fullmatch(values[0]):
        raise Unauthenticated("the ticket is malformed; mint one with POST /tickets")
    return values[0]


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
    holder: str  # digest of the credentials, for the per-credential cap


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _holder(access: Access) -> str:
    return _digest(f"{access.authorization or ''}\n{access.session_token or ''}")


class TicketBook:
    """Live tickets, counted against the caps, and remembered ones, which are not.

    Every ticket lives the same ``ttl``, so minting order is expiry order: expired tickets
    leave ``_live`` from its front, and the oldest live one is its first.
    """

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.clock = ttl, clock
        self._live: dict[str, _Ticket] = {}
        self._by_holder: dict[str, dict[str, float]] = {}  # holder -> digest -> expires_at, oldest first
        # digest -> (spent, expired_at), oldest first: what a refusal says of a ticket no longer live.
        self._remembered: OrderedDict[str, tuple[bool, float]] = OrderedDict()

    def __len__(self) -> int:
        """Live tickets: minted, not spent, not expired."""
        self._purge(self.clock())
        return len(self._live)

    def remembered(self) -> int:
        return len(self._remembered)

    def mint(self, scope: str, access: Access) -> str:
        now = self.clock()
        self._purge(now)
        if len(self._live) >= MAX_TICKETS:
            oldest = next(iter(self._live.values())).expires_at
            raise ResourceExhausted(
                f"this gateway holds {len(self._live)} live tickets, its limit; the oldest expires in "
                f"{max(0.0, oldest - now):.0f}s (or sooner, as they are spent)"
            )
        holder = _holder(access)
        held = self._by_holder.get(holder, {})
        if len(held) >= MAX_TICKETS_PER_CREDENTIAL:
            oldest = next(iter(held.values()))
            raise ResourceExhausted(
                f"these credentials hold {len(held)} live tickets, the limit per credential; the oldest "
                f"expires in {max(0.0, oldest - now):.0f}s: open streams with the tickets already minted"
            )
        ticket = secrets.token_urlsafe(32)
        key = _digest(ticket)
        self._live[key] = _Ticket(scope, access, now + self.ttl, holder)
        self._by_holder.setdefault(holder, {})[key] = now + self.ttl
        return ticket

    def redeem(self, ticket: str, scope: str) -> Access:
        """The credentials of ``ticket`` for ``scope``, spending it; or the reason it opens nothing."""
        now = self.clock()
        self._purge(now)
        key = _digest(ticket)
        found = self._live.get(key)
        if found is None:
            gone = self._remembered.get(key)
            if gone is None:
                raise Unauthenticated("the ticket is unknown to this gateway; mint one with POST /tickets")
            spent, expired_at = gone
            if spent:
                raise Unauthenticated(
                    "the ticket was already used (a ticket opens one stream); mint a new one"
                )
            raise Unauthenticated(
                f"the ticket expired {now - expired_at:.0f}s ago (tickets live {self.ttl:g}s); mint a new one"
            )
        if found.scope != scope:
            # Not spent: the holder may still open the stream it was minted for.
            raise PermissionDenied(f"the ticket is for {found.scope}, not {scope}")
        self._retire(key, found, spent=True)
        return found.access

    def _retire(self, key: str, ticket: _Ticket, spent: bool) -> None:
        del self._live[key]
        held = self._by_holder[ticket.holder]
        del held[key]
        if not held:
            del self._by_holder[ticket.holder]
        self._remembered[key] = (spent, ticket.expires_at)
        while len(self._remembered) > MAX_REMEMBERED:
            self._remembered.popitem(last=False)

    def _purge(self, now: float) -> None:
        while self._live:
            key, first = next(iter(self._live.items()))
            if first.expires_at > now:
                break
            self._retire(key, first, spent=False)
        forget_before = now - self.ttl * REMEMBER_TTLS
        while self._remembered:
            key, (_, expired_at) = next(iter(self._remembered.items()))
            if expired_at >= forget_before:
                break
            del self._remembered[key]


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


def access_for(request: Request, scope: str) -> Access:
    """The headers' credentials, or, when ``?ticket=`` is given, the ticket's for ``scope``."""
    ticket = ticket_in(request.scope.get("query_string", b""))
    if ticket is not None:
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
            413: "too many live tickets on this gateway, or for these credentials (RESOURCE_EXHAUSTED)",
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
