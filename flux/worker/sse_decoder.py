"""Server-Sent Events read from a byte stream, as the HTML standard's event-stream parser reads them.

Pure: bytes in, events out, whatever the chunking. Lines end in CRLF, LF or CR;
``event``, ``data`` and ``id`` fields are kept, comments and ``retry`` skipped;
a blank line ends an event, and an event without data is dropped. A dispatch
can carry a large input, so a line has no length limit short of ``max_line``.
"""

from __future__ import annotations

from dataclasses import dataclass

# A dispatch event carries at most a 16 MiB message, JSON-encoded: room for its escaping.
MAX_LINE_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    data: str
    id: str


class SseDecodeError(ValueError):
    pass


class SseDecoder:
    def __init__(self, max_line: int = MAX_LINE_BYTES):
        self._max_line = max_line
        self._partial: list[bytes] = []  # a line not yet ended, in pieces
        self._partial_size = 0
        self._event = ""
        self._data: list[str] = []
        self._id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """The events that ``chunk`` completes, in order."""
        if b"\n" not in chunk and b"\r" not in chunk:
            self._keep(chunk)
            return []
        text = b"".join((*self._partial, chunk))
        self._partial, self._partial_size = [], 0
        lines = text.splitlines(keepends=True)
        last = lines[-1]
        # Unended, or a CR that a LF in the next chunk may complete: both wait for more.
        if not last.endswith(b"\n"):
            self._keep(lines.pop())
        events: list[Event] = []
        for line in lines:
            event = self._line(line.rstrip(b"\r\n").decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _keep(self, piece: bytes) -> None:
        self._partial.append(piece)
        self._partial_size += len(piece)
        if self._partial_size > self._max_line:
            raise SseDecodeError(f"an event-stream line is longer than {self._max_line} bytes")

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Event | None:
        data, kind = self._data, self._event or "message"
        self._data, self._event = [], ""
        if not data:
            return None
        return Event(kind, "\n".join(data), self._id)
