"""``GET /ui``: the dashboard, static files shipped in the package (gateway/browser/ui/), no build step.

The page holds no secret and reads nothing by itself: it asks for the API token,
keeps it in the tab's sessionStorage and sends it as ``Authorization: Bearer``
on its own calls to the REST routes, so the core decides what it may see, as
for any other client. Served by every gateway, so every replica has one.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

UI = Path(__file__).with_name("ui")

# Everything the page loads comes from here; nothing inline, so a stray injection cannot run.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

router = APIRouter(tags=["dashboard"])


@router.get("/ui", include_in_schema=False)
async def dashboard() -> RedirectResponse:
    # The page's relative URLs (app.js, ../status) resolve against the trailing slash.
    return RedirectResponse("/ui/", status_code=308)


class _Files(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        # Revalidate each load: an upgraded gateway must not serve a page against an older script.
        response.headers["Cache-Control"] = "no-cache"
        return response


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/ui/", _Files(directory=UI, html=True), name="ui")
