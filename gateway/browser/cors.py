"""CORS for pages on other origins, only those named with ``--cors-origin``.

None by default, so nothing changes for anyone who does not ask. Pages send
the tokens as headers (``Authorization``, ``X-Flux-Session``), never as
cookies, so credentialed CORS stays off. A preflight is answered for every
route; an origin not on the list gets no ``Access-Control-Allow-Origin``, so
the browser refuses the page the answer.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

ALLOWED_HEADERS = ("Authorization", "Content-Type", "X-Flux-Session", "X-Flux-Request", "Last-Event-ID")
# Seconds a browser may reuse a preflight answer.
PREFLIGHT_MAX_AGE = 600


def origin(value: str) -> str:
    """``value`` as the browser writes an Origin (scheme://host[:port]), or ValueError saying why not."""
    text = value.strip()
    form = "an origin is scheme://host[:port], e.g. https://dashboard.example.com or http://127.0.0.1:3000"
    if text == "*":
        raise ValueError(f"--cors-origin '*' is refused: name each origin that may call ({form})")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--cors-origin {value!r} is not an origin; {form}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"--cors-origin {value!r} has more than an origin (a path, query or user); {form}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"--cors-origin {value!r} has an invalid port; {form}") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


def install(app: FastAPI, origins: tuple[str, ...]) -> None:
    """Answer CORS for ``origins``; with none, add nothing."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=[origin(o) for o in origins],
        allow_methods=["GET", "POST"],
        allow_headers=list(ALLOWED_HEADERS),
        # GET /status says whose token it is in these; a page elsewhere reads them too.
        expose_headers=["X-Flux-Tenant", "X-Flux-Role"],
        allow_credentials=False,
        max_age=PREFLIGHT_MAX_AGE,
    )
