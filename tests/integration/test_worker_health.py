"""``flux start worker --health-port``: a real worker and a real server on 127.0.0.1 (issue 40).

/readyz says 200 while the dispatch stream is connected and 503 once the server is gone,
then 200 again when it is back; /healthz says 200 throughout (a worker waiting for its
server is alive: the kubelet must not restart it for that).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from flux.testing import Cluster, eventually, plain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HEALTH = re.compile(r"flux worker health on (\S+):(\d+) \(/healthz, /readyz\)")


def _health_url(log: Path) -> str | None:
    for line in log.read_text().splitlines() if log.exists() else ():
        if match := HEALTH.search(plain(line)):
            return f"http://{match.group(1)}:{match.group(2)}"
    return None


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code
    except httpx.TransportError:
        return 0


def test_ready_while_connected_not_ready_while_the_server_is_gone(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--grace-period", "2")
        worker = cluster.start_worker("probed", "--health-port", "0", "--health-host", "127.0.0.1")
        base = eventually(lambda: _health_url(tmp_path / "worker-probed.log"), what="the health line")
        eventually(lambda: _status(base + "/readyz") == 200, what="/readyz 200 while connected")
        assert _status(base + "/healthz") == 200

        cluster.kill_server()
        eventually(lambda: _status(base + "/readyz") == 503, timeout=30, what="/readyz 503 without a server")
        assert _status(base + "/healthz") == 200 and worker.poll() is None

        cluster.restart_server("--grace-period", "2")
        eventually(
            lambda: _status(base + "/readyz") == 200, timeout=30, what="/readyz 200 after reconnecting"
        )
    finally:
        cluster.close()
