"""``Cluster.restart_server`` and a port the kernel handed to someone else for a moment.

A killed server's port is free, and on a busy machine another process may take it (its outgoing
connection, its own port-0 bind) before the restart binds it. Workers keep the old address, so
the harness waits for the port instead of failing the test: a fresh-clone CI run failed once so.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from flux.testing import Cluster, processes

pytestmark = pytest.mark.integration


def _hold(port: int) -> socket.socket:
    """A live listener on ``port``, as another process's server would be."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_a_restart_waits_while_its_port_is_held_for_a_moment(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--no-http")
        cluster.kill_server()
        holder = _hold(_port(cluster.address))
        release = threading.Timer(1.5, holder.close)
        release.start()
        try:
            cluster.restart_server("--no-http")
        finally:
            release.cancel()
            holder.close()
        # Refused at least once while held, then serving on the same address.
        assert "is already in use" in (tmp_path / "server.log").read_text()
        with cluster.client_for(cluster.address) as client:
            assert list(client.workers().workers) == []
    finally:
        cluster.close()


def test_a_port_held_past_the_wait_fails_the_restart_with_the_servers_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "PORT_WAIT", 1.0)
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--no-http")
        cluster.kill_server()
        with _hold(_port(cluster.address)), pytest.raises(AssertionError, match="server did not restart"):
            cluster.restart_server("--no-http")
        assert (tmp_path / "server.log").read_text().count("is already in use") >= 2  # tried again
    finally:
        cluster.close()
