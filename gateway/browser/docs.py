"""``/docs`` and ``/redoc`` from assets shipped with the package, and the OpenAPI security schemes.

Swagger UI and ReDoc come from ``fastapi-offline`` (a maintained package on
PyPI that vendors their bundles), so the pages render on a machine without
internet; FastAPI's defaults load them from a CDN and show a blank page there.
The schemes give Swagger UI its Authorize button: the API token and the
worker token as bearer tokens, the worker session header, and stream tickets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"

SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "The client API token (`FLUX_API_TOKEN`, ./.flux/api.token): client routes and streams.",
    },
    "workerToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "The worker join token (`FLUX_WORKER_TOKEN`, ./.flux/worker.token): worker routes.",
    },
    "workerSession": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Flux-Session",
        "description": "The session token POST /workers/register returned; worker routes after register.",
    },
    "streamTicket": {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": "A single-use ticket from POST /tickets, for streams opened where headers cannot "
        "be set (a browser's EventSource). It is bound to one stream and expires in seconds.",
    },
}

# The doc pages load nothing from elsewhere, not even ReDoc's footer logo (on a CDN):
# what an offline machine cannot reach, the page does not try. Inline scripts are
# FastAPI's page setup; ReDoc's search runs in a blob: worker.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:"
)

# Which credentials each route takes, by path prefix; the first match wins.
_OPEN = ("/healthz", "/metrics")
_WORKER_SESSION = "/workers/{name}/"
_WORKER_ROUTES = (
    "connect",
    "resources",
    "claim",
    "claims",
    "complete",
    "completions",
    "release",
    "heartbeat",
    "source",
)
_STREAMS = ("/executions/{execution_id}/events", "/events")


def _security(path: str) -> list[dict[str, list[str]]] | None:
    if path.startswith(_OPEN):
        return None
    if path == "/workers/register":
        return [{"workerToken": []}]
    if path.startswith(_WORKER_SESSION) and path.split("/")[3] in _WORKER_ROUTES:
        required = [{"workerToken": [], "workerSession": []}]
        return [*required, {"streamTicket": []}] if path.endswith("/connect") else required
    if path == "/tickets":
        return [{"apiToken": []}, {"workerToken": [], "workerSession": []}]
    if path in _STREAMS:
        return [{"apiToken": []}, {"streamTicket": []}]
    return [{"apiToken": []}]


def _local_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return page


def install(app: FastAPI) -> None:
    """Serve the doc pages from the shipped assets and document who may call what."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _local_only(
            get_swagger_ui_html(
                openapi_url=f"{root}{app.openapi_url}",
                title=f"{app.title} - Swagger UI",
                swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            )
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _local_only(
            get_redoc_html(
                openapi_url=f"{root}{app.openapi_url}",
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
            for path, operations in schema.get("paths", {}).items():
                security = _security(path)
                if security is None:
                    continue
                for operation in operations.values():
                    operation["security"] = security
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
