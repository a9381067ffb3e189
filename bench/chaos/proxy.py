"""A TCP fault proxy on 127.0.0.1: everything between workers and a server port goes through it.

It runs its own asyncio loop in a thread, so the chaos run (plain threads) and a
test drive it with blocking calls. Each accepted connection dials the upstream
and copies bytes both ways, one chunk at a time, so a held chunk holds the
sender back (TCP backpressure) instead of piling up in memory. Faults:

- ``cut()``: close every live connection now (both ends); new ones work.
- ``stall(s)``: forward nothing for ``s`` seconds, keeping every socket open;
  what was held is forwarded afterwards.
- ``delay(ms, s)``: add ``ms`` of latency to every chunk for ``s`` seconds.
- ``half_open(s)``: forward nothing for ``s`` seconds with the sockets open,
  then cut them: each peer sees a silent, open socket, then a reset.

``restore()`` ends every fault at once (what a run does before its drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading

CHUNK = 64 * 1024


class _Link:
    """One client connection and its upstream connection."""

    __slots__ = ("client", "upstream")

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter):
        self.client, self.upstream = client, upstream

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            # A cut is a reset the peer sees at once (linger 0, then abort), not a polite FIN.
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


class FaultProxy:
    """``FaultProxy(upstream_port).start()``; ``address`` is where clients connect instead."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"proxy-{upstream_port}", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        # Set while bytes may flow; cleared by stall and half_open.
        self._flowing: asyncio.Event | None = None
        self._delay = 0.0  # seconds added per chunk
        self._delay_until = 0.0  # loop time
        self._fault_ends: asyncio.TimerHandle | None = None
        self.connections = 0  # accepted in total (tests and the run's figures)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------- lifecycle

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def _call(self, coroutine, timeout: float = 10.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        self._cut()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    # ------------------------------------------------------------- faults

    def cut(self) -> int:
        """Close every live connection; returns how many there were."""
        return self._call(self._async(self._cut))

    def stall(self, seconds: float) -> None:
        self._call(self._async(lambda: self._hold(seconds, cut_after=False)))

    def half_open(self, seconds: float) -> None:
        self._call(self._async(lambda: self._hold(seconds, cut_after=True)))

    def delay(self, milliseconds: float, seconds: float) -> None:
        def apply() -> None:
            self._delay = milliseconds / 1000
            self._delay_until = self._loop.time() + seconds

        self._call(self._async(apply))

    def restore(self) -> None:
        """End every fault now: bytes flow again, without delay."""

        def apply() -> None:
            if self._fault_ends is not None:
                self._fault_ends.cancel()
                self._fault_ends = None
            self._delay_until = 0.0
            assert self._flowing is not None
            self._flowing.set()

        self._call(self._async(apply))

    @staticmethod
    async def _async(function):  # type: ignore[no-untyped-def]
        return function()

    def _cut(self) -> int:
        links, self._links = self._links, set()
        for link in links:
            link.abort()
        return len(links)

    def _hold(self, seconds: float, cut_after: bool) -> None:
        assert self._flowing is not None
        if self._fault_ends is not None:
            self._fault_ends.cancel()
        self._flowing.clear()

        def release() -> None:
            self._fault_ends = None
            if cut_after:
                self._cut()
            assert self._flowing is not None
            self._flowing.set()

        self._fault_ends = self._loop.call_later(seconds, release)

    # ------------------------------------------------------------- forwarding

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()  # upstream down (a server restarting): the client sees a reset
            return
        link = _Link(client_writer, upstream_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer, link),
                self._pipe(upstream_reader, client_writer, link),
            )
        finally:
            self._links.discard(link)
            link.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        assert self._flowing is not None
        try:
            while chunk := await reader.read(CHUNK):
                await self._flowing.wait()
                if self._loop.time() < self._delay_until:
                    await asyncio.sleep(self._delay)
                    await self._flowing.wait()  # a stall may have begun while the chunk was delayed
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            link.abort()  # one side reset, or a cut closed the link: the other direction ends too
