"""Log output for ``--log-format text|json`` (default text; env ``FLUX_LOG_FORMAT``).

text: ``2024-05-01 12:00:00,123 INFO flux.lifecycle: execution dispatched
execution_id=… workflow=hello worker=w1 generation=1``, for a terminal.

json: one object per line, for log shippers: ``ts`` (RFC 3339, UTC), ``level``,
``logger``, ``msg``, and for lifecycle lines ``event`` plus each field
(``execution_id``, ``workflow``, ``worker``, ``generation``, …) as members, so a
query can filter on them without parsing the message.

Lifecycle records carry their fields in ``record.fields`` (see
``flux.dispatcher.state.lifecycle``); any other record is rendered as usual.

The dispatcher writes four lifecycle lines per execution, thousands a second. ``event`` queues
one, without a ``LogRecord``, for a thread that formats and writes them (``_Writer``), while the
handler ``configure`` installed is the only place an INFO record could go. Any other handler,
filter or formatter (a test's ``caplog``, an embedding application's own) puts every line back on
the record path.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

FORMATS = ("text", "json")
ENV = "FLUX_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Members every JSON line has; a lifecycle field never overwrites one of them.
_RESERVED = frozenset({"ts", "level", "logger", "msg", "event", "exc_info", "stack_info"})


def default_format() -> str:
    return os.environ.get(ENV, "text").strip().lower() or "text"


# What would split a key=value line into misleading pairs.
_NEEDS_QUOTES = re.compile(r'[\s="]')


def _text(value: object) -> str:
    kind = type(value)  # the common cases first: a lifecycle line has six fields, four lines an execution
    if kind is str:
        return value if value and not _NEEDS_QUOTES.search(value) else json.dumps(value)  # type: ignore[return-value]
    if kind is int:
        return str(value)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return json.dumps(text) if not text or _NEEDS_QUOTES.search(text) else text


class _Seconds:
    """A log line's date and time part, rendered once per whole second."""

    def __init__(self, render: Callable[[int], str]):
        self._render = render
        # The last whole second formatted, and its text: one tuple, read and replaced atomically.
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, second: int) -> str:
        last = self._last
        if last[0] != second:
            last = self._last = (second, self._render(second))
        return last[1]


class TextFormatter(logging.Formatter):
    """The classic one-line format, with a lifecycle record's fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._seconds = _Seconds(
            lambda second: time.strftime(self.default_time_format, self.converter(second))
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # What logging.Formatter writes, with the date and time part formatted once a second.
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return f"{self._seconds(int(record.created))},{int(record.msecs):03d}"

    def formatMessage(self, record: logging.LogRecord) -> str:
        return self._line(
            record.asctime, record.levelname, record.name, record.message, getattr(record, "fields", None)
        )

    def event_line(self, created: float, name: str, message: str, event: str, fields: dict[str, Any]) -> str:
        """What ``format`` makes of an INFO record with these fields, created at ``created``."""
        second = int(created)
        return self._line(
            f"{self._seconds(second)},{int((created - second) * 1000):03d}", "INFO", name, message, fields
        )

    @staticmethod
    def _line(asctime: str, level: str, name: str, message: str, fields: object) -> str:
        line = f"{asctime} {level} {name}: {message}"  # TEXT_FORMAT
        if isinstance(fields, dict) and fields:
            line += " " + " ".join([f"{key}={_text(value)}" for key, value in fields.items()])
        return line


_utc_seconds = _Seconds(lambda second: datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))


def _timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds; the date and time part is formatted once a second."""
    second = int(created)
    return f"{_utc_seconds(second)}.{int((created - second) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = _entry(
            record.created, record.levelname, record.name, record.getMessage(),
            getattr(record, "event", None), getattr(record, "fields", None),
        )  # fmt: skip
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return _dumps(entry)

    def event_line(self, created: float, name: str, message: str, event: str, fields: dict[str, Any]) -> str:
        """What ``format`` makes of an INFO record with this event and fields, created at ``created``."""
        return _dumps(_entry(created, "INFO", name, message, event, fields))


def _entry(
    created: float, level: str, name: str, message: str, event: object, fields: object
) -> dict[str, Any]:
    entry: dict[str, Any] = {"ts": _timestamp(created), "level": level, "logger": name, "msg": message}
    if event is not None:
        entry["event"] = event
    if isinstance(fields, dict):
        for key, value in fields.items():
            entry[key if key not in _RESERVED else f"field_{key}"] = value
    return entry


def _dumps(entry: dict[str, Any]) -> str:
    # default=str: a field of an unexpected type still makes a line, never an error.
    return json.dumps(entry, default=str, ensure_ascii=False)


def formatter(fmt: str) -> TextFormatter | JsonFormatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"log format must be one of {', '.join(FORMATS)}; got {fmt!r}")


# The format ``configure`` set last; ``emit`` writes its lines the same way.
_format = "text"


def current_format() -> str:
    return _format


def emit(
    text: str, stream: TextIO | None = None, level: str = "INFO", logger: str = "flux", **fields: object
) -> None:
    """A line the process prints itself rather than logs (a bound address, a generated token, a
    fatal error): as is in text format, and in json format one object shaped like the log lines,
    with ``fields`` as members, so that every line of a json-format process parses."""
    line = text
    if _format == "json":
        entry = {"ts": _timestamp(time.time()), "level": level, "logger": logger, "msg": text}
        entry.update((k if k not in _RESERVED else f"field_{k}", v) for k, v in fields.items())
        line = json.dumps(entry, default=str, ensure_ascii=False)
    print(line, file=stream or sys.stdout, flush=True)


def event(logger: logging.Logger, event: str, message: str, fields: dict[str, Any]) -> None:
    """One INFO line for ``event`` with ``fields`` (rendered by the formatters above), for a caller
    that has checked ``logger.isEnabledFor(logging.INFO)``.

    Handed to the writer thread while the handler ``configure`` installed is the only one the
    record would reach; a ``LogRecord`` otherwise, so whoever else listens gets it as
    ``log.info`` would make it.
    """
    writer = _writer
    if writer is None or not _only_ours(logger, writer.handler, writer.formatter):
        logger.handle(_record(logger, event, message, fields))
        return
    writer.lines.put((time.time(), logger, event, message, fields))


def flush() -> None:
    """Wait until every event line handed over so far is written."""
    if _writer is not None:
        _writer.flush()


# How long the writer lets lines gather after a write: at most 200 writes a second, and in
# between, queuing a line wakes no thread (woken for each line, it spent 80 µs of CPU a line here).
GATHER_SECONDS = 0.005
# Lines to a write at most; a full batch is followed by the next at once, so no backlog builds.
BATCH_LINES = 512


class _Writer:
    """Formats and writes event lines on a thread of its own, several to a write.

    The dispatcher's thread only queues a line (a fraction of a microsecond); the formatting and
    the write, 30 µs a line there, happen while that thread waits for its next message, so they
    delay no answer. After each write the writer lets lines gather for ``GATHER_SECONDS``. Lines
    keep their order and their time (taken when queued). The queue is written out at exit
    (``atexit``) and whenever ``flush`` is called; a process killed outright loses at most the
    lines of its last few milliseconds, as a crash loses a buffered stream's.
    """

    def __init__(self, handler: logging.StreamHandler[TextIO], line_formatter: TextFormatter | JsonFormatter):
        self.handler, self.formatter = handler, line_formatter
        self.lines: queue.SimpleQueue[_Line | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="flux-log-lines", daemon=True)
        self._thread.start()

    def flush(self) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            written = threading.Event()
            self.lines.put(written)
            written.wait(timeout=5)

    def stop(self) -> None:
        self.flush()
        self.lines.put(None)

    def _run(self) -> None:
        lines = self.lines
        while True:
            batch = [lines.get()]
            while len(batch) < BATCH_LINES:
                try:
                    batch.append(lines.get_nowait())
                except queue.Empty:
                    break
            self._write([item for item in batch if isinstance(item, tuple)])
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()
            if None in batch:
                return
            if len(batch) < BATCH_LINES:  # else more are waiting already: write on
                # Let lines gather: meanwhile nobody waits on the queue, so queuing one wakes no thread.
                time.sleep(GATHER_SECONDS)

    def _write(self, batch: list[_Line]) -> None:
        handler, line_formatter, terminator = self.handler, self.formatter, self.handler.terminator
        text, written = [], []
        for line in batch:
            created, logger, event, message, fields = line
            try:
                text.append(
                    line_formatter.event_line(created, logger.name, message, event, fields) + terminator
                )
                written.append(line)
            except Exception:  # as StreamHandler.emit would: reported; the other lines are written
                handler.handleError(_record(logger, event, message, fields))
        if not text:
            return
        handler.acquire()
        try:
            handler.stream.write("".join(text))
            handler.flush()
        except Exception:
            for _, logger, event, message, fields in written:
                handler.handleError(_record(logger, event, message, fields))
        finally:
            handler.release()


# A queued event line: when, on which logger, the event, its message and its fields.
_Line = tuple[float, logging.Logger, str, str, dict[str, Any]]
_writer: _Writer | None = None


def _stop_writer() -> None:
    if _writer is not None:
        _writer.stop()


def _forget_writer() -> None:
    # A forked child has no writer thread: its lines take the record path.
    global _writer
    _writer = None


atexit.register(_stop_writer)
os.register_at_fork(after_in_child=_forget_writer)


def _only_ours(logger: logging.Logger, handler: logging.Handler, line_formatter: logging.Formatter) -> bool:
    root = logging.root
    handlers = root.handlers
    if len(handlers) != 1 or handlers[0] is not handler or handler.formatter is not line_formatter:
        return False
    if handler.filters or root.filters or handler.level > logging.INFO:
        return False
    node: logging.Logger | None = logger
    while node is not None and node is not root:
        if node.handlers or node.filters or not node.propagate:
            return False
        node = node.parent
    return True


def _record(logger: logging.Logger, event: str, message: str, fields: dict[str, Any]) -> logging.LogRecord:
    # log.info(), less its walk up the stack for the caller's file and line, which no format prints.
    return logger.makeRecord(
        logger.name, logging.INFO, __file__, 0, message, (), None, extra={"event": event, "fields": fields}
    )


def configure(level: str | int = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt``, replacing any handler set before."""
    global _format, _writer
    handler = logging.StreamHandler(stream or sys.stderr)
    line_formatter = formatter(fmt)
    handler.setFormatter(line_formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    _stop_writer()  # what the old handler was given is written before the new one takes over
    _format, _writer = fmt, _Writer(handler, line_formatter)
    # httpx logs every request at INFO: shown only with --log-level DEBUG, like the rest of the
    # chatter (the SSE worker's own line per call included).
    logging.getLogger("httpx").setLevel(
        logging.DEBUG if root.getEffectiveLevel() <= logging.DEBUG else logging.WARNING
    )
    # Neither format prints them; not gathering them makes every record cheaper
    # (the logging HOWTO's "Optimization" section).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
