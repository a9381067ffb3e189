"""Log output for ``--log-format text|json`` (default text; env ``FLUX_LOG_FORMAT``).

text: ``2024-05-01 12:00:00,123 INFO flux.lifecycle: execution dispatched
execution_id=… workflow=hello worker=w1 generation=1``, for a terminal.

json: one object per line, for log shippers: ``ts`` (RFC 3339, UTC), ``level``,
``logger``, ``msg``, and for lifecycle lines ``event`` plus each field
(``execution_id``, ``workflow``, ``worker``, ``generation``, …) as members, so a
query can filter on them without parsing the message.

Lifecycle records carry their fields in ``record.fields`` (see
``flux.dispatcher.state.lifecycle``); any other record is rendered as usual.

The dispatcher writes four lifecycle lines per execution, thousands a second. ``event`` writes
one without a ``LogRecord`` while the handler ``configure`` installed is the only place an INFO
record could go: the same line, at less than half the cost (16 against 37 µs here). Any other
handler, filter or formatter (a test's ``caplog``, an embedding application's own) puts every
line back on the record path.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
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
# The handler ``configure`` installed, and its formatter (see ``event``).
_handler: logging.StreamHandler[TextIO] | None = None
_formatter: TextFormatter | JsonFormatter | None = None


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

    Written straight to the stream, the way ``StreamHandler.emit`` would write it, while the
    handler ``configure`` installed is the only one the record would reach; a ``LogRecord``
    otherwise, so whoever else listens gets it as ``log.info`` would make it.
    """
    handler, line_formatter = _handler, _formatter
    if handler is None or line_formatter is None or not _only_ours(logger, handler, line_formatter):
        logger.handle(_record(logger, event, message, fields))
        return
    line = line_formatter.event_line(time.time(), logger.name, message, event, fields)
    handler.acquire()
    try:
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except RecursionError:  # as StreamHandler.emit: see issue 36272
        raise
    except Exception:
        handler.handleError(_record(logger, event, message, fields))
    finally:
        handler.release()


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
    global _format, _handler, _formatter
    handler = logging.StreamHandler(stream or sys.stderr)
    line_formatter = formatter(fmt)
    handler.setFormatter(line_formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    _format, _handler, _formatter = fmt, handler, line_formatter
    # httpx logs every request at INFO: shown only with --log-level DEBUG, like the rest of the
    # chatter (the SSE worker's own line per call included).
    logging.getLogger("httpx").setLevel(
        logging.DEBUG if root.getEffectiveLevel() <= logging.DEBUG else logging.WARNING
    )
    # Neither format prints them; not gathering them makes every record cheaper
    # (the logging HOWTO's "Optimization" section).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
