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


def _release_once_refused(holder: socket.socket, log: Path, stop: threading.Event) -> threading.Thread:
    """Close ``holder`` once the server has said its port is taken: a refusal first, then a free
    port, however long a start takes on this machine."""

    def watch() -> None:
        while not stop.wait(0.05):
            if log.exists() and "is already in use" in log.read_text(errors="replace"):
                break
        holder.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_restart_waits_while_its_port_is_held_for_a_moment(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--no-http")
        cluster.kill_server()
        log = tmp_path / "server.log"  # the first server's lines never say the port is taken
        stop = threading.Event()
        watcher = _release_once_refused(_hold(_port(cluster.address)), log, stop)
        try:
            cluster.restart_server("--no-http")
        finally:
            stop.set()
            watcher.join(timeout=10)
        # Refused while held, started again once free, and serving on the same address.
        assert "is already in use" in log.read_text()
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
        # Given up with the server's own reason (the test above shows it is tried again meanwhile).
        assert "is already in use" in (tmp_path / "server.log").read_text()
    finally:
        cluster.close()
