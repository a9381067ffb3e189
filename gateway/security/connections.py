"""The HTTP front door: what a connection may cost before the app sees a request.

uvicorn on its own waits forever for a request head, takes a head of any
size and accepts connections until the process runs out of file descriptors;
beside the gRPC core (same process, same loop) that lets a slow or greedy
client starve the core: its accepts fail, its workers cannot connect. So the
protocol here wraps uvicorn's own (httptools) with three bounds, each
answered in the gateway's error shape before any route runs:

- a request head must arrive within ``head_timeout`` of the connection (or of
  its first byte on a kept-alive one), else 408;
- a head over ``max_head_bytes`` is cut at once, 431;
- past ``max_connections`` open connections a new one gets 503 and is closed;
- so does one past ``per_address`` open connections from one client address (an IPv6
  client by its /64, which one host usually holds whole): by default half the cap, so one
  address that opens connections and never finishes a head cannot take every place, and
  callers elsewhere (a worker, an operator with a token) still get in. Behind a reverse
  proxy every client has the proxy's address: raise it there (or set it to the cap).

The cap also stays below the open-file limit, which is raised to its hard
ceiling at start, so the core keeps descriptors for its own sockets and store.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import resource
import socket
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from flux import defaults
from flux.errors import BEFORE_THE_APP

log = logging.getLogger("flux.gateway")

# Descriptors kept for everything but HTTP connections (gRPC, the store, logs), out of the limit.
RESERVED_FDS = 256
# The soft open-file limit is raised to the hard one, but no further than this.
FD_TARGET = 65536
# Also how many connections asyncio accepts in one go before any of them can be refused and
# closed: a burst of accepts is what could push the process past its open-file limit.
BACKLOG = 128
# After a 431 the rest of an oversized head is read and dropped for this long (or this many
# bytes) before the connection closes: closing with unread bytes makes the kernel send a reset,
# which can destroy the answer before the client reads it.
LINGER_SECONDS = 2.0
LINGER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    # Seconds a request head may take to arrive in full.
    head_timeout: float = defaults.HTTP_HEAD_TIMEOUT
    # Bytes of request line plus headers.
    max_head_bytes: int = defaults.HTTP_MAX_HEAD_BYTES
    # Open connections (SSE streams included) before new ones get 503.
    max_connections: int = defaults.HTTP_MAX_CONNECTIONS
    # Open connections from one address (IPv6: one /64) before its new ones get 503; 0: half of
    # max_connections.
    max_connections_per_address: int = 0
    # Seconds an idle kept-alive connection stays open.
    keep_alive: float = defaults.HTTP_KEEP_ALIVE

    @property
    def per_address(self) -> int:
        chosen = self.max_connections_per_address or max(1, self.max_connections // 2)
        return min(chosen, self.max_connections)


def address_key(peer: object) -> str:
    """Whose connection this is, for the per-address cap: an IPv4 address, or an IPv6 /64."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)  # a Unix socket or something else: counted as one
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def raise_open_files_limit(target: int = FD_TARGET) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard one (where allowed); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
            soft = ceiling
        except (ValueError, OSError):  # not allowed here (e.g. a sandbox): keep what we have
            pass
    return FD_TARGET if soft == resource.RLIM_INFINITY else soft


def fit_to_open_files(limits: HttpLimits, open_files: int) -> HttpLimits:
    """``limits`` with the connection cap lowered to leave the core its descriptors."""
    room = max(16, open_files - max(RESERVED_FDS, open_files // 8))
    if limits.max_connections <= room:
        return limits
    log.warning(
        "--http-max-connections %d lowered to %d: the process may open only %d files (ulimit -n); "
        "raise that limit to serve more connections",
        limits.max_connections,
        room,
        open_files,
    )
    return replace(limits, max_connections=room)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or OSError naming the port: a busy port ends the start in one line.

    Bound here rather than by uvicorn, which logs the failure and exits the process; and
    without SO_REUSEPORT, so a second server on the same port is refused instead of sharing it.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise OSError(f"cannot bind the HTTP port {port} on {host!r}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only, not a live listener
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        why = "is already in use" if exc.errno == 98 else f"cannot be bound: {exc.strerror or exc}"
        raise OSError(f"the HTTP port {port} on {host} {why}") from None
    return sock


class AcceptFailures(logging.Filter):
    """asyncio logs every failed accept with a traceback, up to a backlog's worth per loop turn:
    thousands of lines a second once the process is out of descriptors. One line instead, then
    a count once a minute while it lasts."""

    EVERY = 60.0

    def __init__(self, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.clock, self.last, self.hidden = clock, -self.EVERY, 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        now = self.clock()
        if now - self.last < self.EVERY:
            self.hidden += 1
            return False
        hidden, self.hidden, self.last = self.hidden, 0, now
        record.msg = (
            "HTTP accept failed: the process is out of open files (ulimit -n); "
            "further failures are counted here once a minute"
        ) + (f" ({hidden} since the last report)" if hidden else "")
        record.args, record.exc_info, record.exc_text = (), None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_accept_failures() -> None:
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, AcceptFailures) for f in asyncio_log.filters):
        asyncio_log.addFilter(AcceptFailures())


class _Pressure:
    """One warning per episode of a full connection table, not one per refused connection."""

    def __init__(self) -> None:
        self.full = False
        self.crowded: set[str] = set()  # addresses at their own cap, warned about once each episode

    def address_full(self, key: str, cap: int) -> None:
        if key not in self.crowded and len(self.crowded) < 64:
            self.crowded.add(key)
            log.warning(
                "HTTP connections from %s reached %d, the limit per address: its new connections get 503 "
                "until some close (--http-max-connections-per-address)",
                key,
                cap,
            )

    def address_eased(self, key: str, open_now: int, cap: int) -> None:
        if key in self.crowded and open_now < cap // 2:
            self.crowded.discard(key)

    def reached(self, cap: int) -> None:
        if not self.full:
            self.full = True
            log.warning(
                "HTTP connection cap %d reached: new connections get 503 until some close "
                "(--http-max-connections)",
                cap,
            )

    def eased(self, open_now: int, cap: int) -> None:
        if self.full and open_now < cap // 2:
            self.full = False
            log.info("HTTP connections back to %d of %d", open_now, cap)


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head timeout, head size cap and connection cap."""

    limits: ClassVar[HttpLimits] = HttpLimits()
    pressure: ClassVar[_Pressure] = _Pressure()
    # Open connections by address_key, for the per-address cap (one table per gateway).
    by_address: ClassVar[dict[str, int]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether the bytes that arrive next belong to a request head, how many of those came
        # so far, and the last three (a head's blank line may straddle two reads).
        self._in_head = True
        self._head_bytes = 0
        self._tail = b""
        self._head_timer: asyncio.TimerHandle | None = None
        self._discarded: int | None = None  # bytes dropped after a 431; None while serving
        self._address: str | None = None  # counted in by_address under this key

    # -------------------------------------------------------------- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.limits.max_connections
        if len(self.connections) > cap:
            self.pressure.reached(cap)
            self._refuse(503, f"the gateway serves at most {cap} connections; retry shortly")
            return
        key, share = address_key(transport.get_extra_info("peername")), self.limits.per_address
        if self.by_address.get(key, 0) >= share:
            self.pressure.address_full(key, share)
            self._refuse(
                503,
                f"the gateway serves at most {share} connections from one address; close some, or retry shortly",
            )
            return
        self.by_address[key] = self.by_address.get(key, 0) + 1
        self._address = key
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            left = self.by_address[self._address] - 1
            if left:
                self.by_address[self._address] = left
            else:
                del self.by_address[self._address]
            self.pressure.address_eased(self._address, left, self.limits.per_address)
            self._address = None
        super().connection_lost(exc)
        self.pressure.eased(len(self.connections), self.limits.max_connections)

    def data_received(self, data: bytes) -> None:
        if self._discarded is not None:
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.transport.close()
            return
        # Measured before the parser sees the bytes: a whole oversized head can arrive in one read,
        # and once parsed it would be on its way to the app.
        if self._in_head and self._head_too_large(data):
            self._refuse(
                431, f"the request head is over the {self.limits.max_head_bytes} byte limit", linger=True
            )
            return
        super().data_received(data)

    def _head_too_large(self, data: bytes) -> bool:
        window = self._tail + data
        end = window.find(b"\r\n\r\n")
        if end >= 0:  # the head ends in this read; what follows is body or the next request
            return self._head_bytes + end + 4 - len(self._tail) > self.limits.max_head_bytes
        self._head_bytes += len(data)
        self._tail = window[-3:]
        return self._head_bytes > self.limits.max_head_bytes

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline:  # the next bytes start a new head
            self._in_head, self._head_bytes, self._tail = True, 0, b""

    # -------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # The first byte of a request: from here its head has head_timeout to arrive (the wait
        # before it is the keep-alive timeout's, or on a new connection already timed).
        self._in_head = True
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes, self._tail = False, 0, b""
        self._disarm()
        super().on_headers_complete()

    # -------------------------------------------------------------- timers and refusals

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(408, f"the request head did not arrive within {self.limits.head_timeout:g}s")

    def _refuse(self, status: int, message: str, linger: bool = False) -> None:
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head while a response is under way: an answer written now would land inside
            # that response, so the connection is cut instead.
            self.transport.close()
            return
        body = json.dumps({"error": {"code": BEFORE_THE_APP[status], "message": message}}).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            + ("retry-after: 1\r\n" if status == 503 else "")
            + "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self._discarded = 0
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
            return
        self.transport.close()


def guarded_protocol(limits: HttpLimits) -> type[GuardedProtocol]:
    """A protocol class bound to ``limits`` (uvicorn builds one instance per connection)."""
    return type(
        "GuardedProtocol", (GuardedProtocol,), {"limits": limits, "pressure": _Pressure(), "by_address": {}}
    )
