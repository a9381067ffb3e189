import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sse_starlette.sse import AppStatus

from flux.testing import TRANSPORTS, Cluster
from flux.testing.browser import CHROMIUM_ARGS, chromium_path
from flux.testing.postgres import TemporaryPostgres

WORKFLOWS = Path(__file__).with_name("workflows.py")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses a cluster runs once per worker transport, unless marked ``transports(...)``,
    and once per store backend when marked ``backends(...)``."""
    if "transport" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("transports")
        metafunc.parametrize("transport", marker.args if marker else TRANSPORTS)
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", marker.args)


@pytest.fixture
def transport() -> str:
    return "grpc"


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture(scope="session")
def postgres() -> Iterator[TemporaryPostgres]:
    """One PostgreSQL server for the session (started from initdb here); each test gets its own database."""
    with TemporaryPostgres() as server:
        yield server


@pytest.fixture
def pg_url(postgres: TemporaryPostgres) -> str:
    return postgres.database()


@pytest.fixture(autouse=True)
def _no_foreign_cpu_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers started by a test see no load but their own unless the test says otherwise: how busy
    # this shared box happens to be must not decide whether a cpu=2 execution fits (it held one
    # CREATED for a minute while other jobs loaded both cores). Observed load has its own tests.
    monkeypatch.setenv("FLUX_SIMULATED_CPU_BUSY", "0")


@pytest.fixture(autouse=True)
def _sse_starlette_not_exiting() -> Iterator[None]:
    # A gateway stopped in this process sets this global flag; the next app must start without it.
    AppStatus.should_exit = False
    yield
    AppStatus.should_exit = False


@pytest.fixture
def cluster(
    tmp_path: Path, transport: str, backend: str, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """A real server (gRPC core and HTTP gateway) on 127.0.0.1:0 with the test workflows registered.

    Workers, added per test, connect over ``transport``: to the core, or through the gateway. The
    store is SQLite, or a fresh PostgreSQL database when the test runs on ``backend`` "postgres".
    """
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flux.db"
    c = Cluster(tmp_path, transport, db=db)
    try:
        c.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()


# Debian's chromium, driven by Playwright for Python: Playwright's own browser download
# cannot work here, so `playwright install` is never run (.ci/run installs chromium).
@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium; skipped where there is none, but a failure where CI is set.

    One per test: Playwright's sync API runs an event loop on this thread while it is
    open, and the asyncio tests that come after need the thread to themselves.
    """
    missing = None
    chromium_at = chromium_path()
    if chromium_at is None:
        missing = "no chromium at $FLUX_CHROMIUM, /usr/bin/chromium or on PATH (apt-get install -y chromium)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run in CI: {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_at, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()
