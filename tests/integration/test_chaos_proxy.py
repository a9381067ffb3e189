"""The chaos fault proxy on real loopback sockets: each fault as a client through it sees it.

Waits are bounded lower bounds only (a stalled or delayed byte cannot arrive
early); nothing asserts how fast anything happens.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from bench.chaos.proxy import FaultProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback echo server; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stopping = threading.Event()
    peers: list[socket.socket] = []

    def serve(peer: socket.socket) -> None:
        with peer, contextlib.suppress(OSError):  # a cut resets the upstream side too
            while data := peer.recv(4096):
                peer.sendall(data)

    def accept() -> None:
        while not stopping.is_set():
            try:
                peer, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            peers.append(peer)
            threading.Thread(target=serve, args=(peer,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stopping.set()
    thread.join(5)
    server.close()


@pytest.fixture
def proxy(echo: int) -> Iterator[FaultProxy]:
    running = FaultProxy(echo).start()
    yield running
    running.close()


def _connect(proxy: FaultProxy) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    client.sendall(b"hello")
    assert client.recv(16) == b"hello"  # flowing before any fault
    return client


def _ended(client: socket.socket) -> bool:
    """True when the connection is closed or reset (read within a bounded wait)."""
    client.settimeout(5)
    try:
        return client.recv(16) == b""
    except ConnectionResetError:
        return True


def test_bytes_flow_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy) as client:
        client.sendall(b"x" * 100_000)
        received = b""
        while len(received) < 100_000:
            received += client.recv(65536)
        assert received == b"x" * 100_000
    assert proxy.connections == 1


def test_cut_ends_every_live_connection_and_new_ones_work(proxy: FaultProxy) -> None:
    first, second = _connect(proxy), _connect(proxy)
    assert proxy.cut() == 2
    assert _ended(first) and _ended(second)
    with _connect(proxy):
        pass


def test_stall_holds_bytes_with_the_socket_open_then_delivers_them(proxy: FaultProxy) -> None:
    with _connect(proxy) as client:
        proxy.stall(0.6)
        client.sendall(b"held")
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(16)  # nothing comes back, and the socket is not closed either
        client.settimeout(5)
        assert client.recv(16) == b"held"


def test_restore_ends_a_stall_at_once(proxy: FaultProxy) -> None:
    with _connect(proxy) as client:
        proxy.stall(600)
        client.sendall(b"freed")
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            client.recv(16)
        proxy.restore()
        client.settimeout(5)
        assert client.recv(16) == b"freed"


def test_delay_adds_latency_to_each_chunk(proxy: FaultProxy) -> None:
    with _connect(proxy) as client:
        proxy.delay(400, 30)
        client.sendall(b"late")
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            client.recv(16)  # at least 400 ms each way
        client.settimeout(5)
        assert client.recv(16) == b"late"


def test_half_open_is_silent_and_open_then_cut(proxy: FaultProxy) -> None:
    with _connect(proxy) as client:
        proxy.half_open(0.6)
        client.sendall(b"lost")
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(16)  # silent, yet open: no close, no reset
        assert _ended(client)  # then cut, and what was held never arrives
    with _connect(proxy):
        pass


def test_a_client_of_a_dead_upstream_is_closed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as gone:
        port = gone.getsockname()[1]
    proxy = FaultProxy(port).start()
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        with client:
            assert _ended(client)
    finally:
        proxy.close()
