from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.testing import Cluster

WORKFLOWS = Path(__file__).with_name("workflows.py")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A real server on 127.0.0.1:0 with the test workflows registered; workers added per test."""
    c = Cluster(tmp_path)
    try:
        c.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()
