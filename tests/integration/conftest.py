from collections.abc import Iterator
from pathlib import Path

import pytest
from sse_starlette.sse import AppStatus

from flux.testing import TRANSPORTS, Cluster

WORKFLOWS = Path(__file__).with_name("workflows.py")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses a cluster runs once per worker transport, unless marked ``transports(...)``."""
    if "transport" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("transports")
        metafunc.parametrize("transport", marker.args if marker else TRANSPORTS)


@pytest.fixture
def transport() -> str:
    return "grpc"


@pytest.fixture(autouse=True)
def _sse_starlette_not_exiting() -> Iterator[None]:
    # A gateway stopped in this process sets this global flag; the next app must start without it.
    AppStatus.should_exit = False
    yield
    AppStatus.should_exit = False


@pytest.fixture
def cluster(tmp_path: Path, transport: str) -> Iterator[Cluster]:
    """A real server (gRPC core and HTTP gateway) on 127.0.0.1:0 with the test workflows registered.

    Workers, added per test, connect over ``transport``: to the core, or through the gateway.
    """
    c = Cluster(tmp_path, transport)
    try:
        c.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()
