"""What a page on another site can make a browser do to the gateway, and how each is refused.

Three pure ASGI layers, all answering before any route runs:

- ``NoFraming``: every response says it may not be framed (``X-Frame-Options: DENY`` and the CSP
  directive ``frame-ancestors 'none'``), so no site can overlay the dashboard or ``/docs`` and
  steer a click (clickjacking).
- ``HostCheck``: the ``Host`` header must name the gateway. A page on ``evil.example`` whose name
  its owner re-points at 127.0.0.1 (DNS rebinding) would otherwise be same-origin with a loopback
  gateway; its requests still say ``Host: evil.example``. On with ``--insecure`` (the bound names)
  or whenever ``--allowed-host`` is given.
- ``CrossSiteCheck``: with ``--insecure`` there is no token to forge, so a state-changing request
  (anything but GET, HEAD, OPTIONS) must carry something a cross-site page cannot send without a
  CORS preflight, which the gateway answers only for ``--cors-origin`` origins: an
  ``Authorization`` or ``X-Flux-Session`` header, ``X-Flux-Request``, or a JSON ``Content-Type``.
  A form, a ``fetch(..., {mode: "no-cors"})`` or a beacon can send none of them. With auth on,
  every such route needs the ``Authorization`` header already.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flux.errors import PermissionDenied
from gateway.wire import error_response

REQUEST_HEADER = "X-Flux-Request"
FRAME_ANCESTORS = "frame-ancestors 'none'"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers a page cannot add to a cross-origin request without a preflight (not CORS-safelisted).
_UNFORGEABLE = (b"authorization", b"x-flux-session", REQUEST_HEADER.lower().encode())
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class NoFraming:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _unframeable(message.get("headers", []))}
            await send(message)

        await self.app(scope, receive, framed)


def _unframeable(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    out, has_policy = [], False
    for name, value in headers:
        if name.lower() == b"x-frame-options":
            continue
        if name.lower() == b"content-security-policy":
            has_policy = True
            if b"frame-ancestors" not in value:
                value = value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS.encode()
        out.append((name, value))
    if not has_policy:
        out.append((b"content-security-policy", FRAME_ANCESTORS.encode()))
    out.append((b"x-frame-options", b"DENY"))
    return out


def host_name(value: str) -> str:
    """The name of a ``Host`` header, without port or brackets, lowercase: ``[::1]:80`` is ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, colon, port = value.rpartition(":")
    return (name if colon and port.isdigit() and ":" not in name else value).rstrip(".")


def allowed_hosts(bound: str, loopback: bool, extra: Iterable[str]) -> tuple[str, ...]:
    """The names a gateway bound to ``bound`` answers to: that address, the loopback names when it
    is loopback, and ``--allowed-host`` values."""
    names = [host_name(bound) if bound else ""]
    if loopback:
        names += LOOPBACK_NAMES
    names += [host_name(h) for h in extra]
    return tuple(dict.fromkeys(n for n in names if n))


class HostCheck:
    def __init__(self, app: ASGIApp, hosts: tuple[str, ...]):
        self.app, self.hosts = app, frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.hosts:
            await self.app(scope, receive, send)
            return
        raw = next((v for n, v in scope["headers"] if n == b"host"), b"").decode("latin-1")
        if host_name(raw) not in self.hosts:
            shown = raw[:100] if raw else "(none)"
            refusal = PermissionDenied(
                f"the Host header {shown!r} does not name this gateway (it answers to "
                f"{', '.join(sorted(self.hosts))}); add a name with --allowed-host"
            )
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class CrossSiteCheck:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS or _preflighted(scope["headers"]):
            await self.app(scope, receive, send)
            return
        refusal = PermissionDenied(
            f"{scope['method']} needs a header a cross-site page cannot send: Content-Type: "
            f"application/json, Authorization, or {REQUEST_HEADER}: 1 (a server without auth "
            "refuses state changes a form or a no-cors fetch could make)"
        )
        await error_response(refusal)(scope, receive, send)


def _preflighted(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name in _UNFORGEABLE and value:
            return True
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            if media == b"application/json" or media.endswith(b"+json"):
                return True
    return False
