"""What the dispatcher accepts: names, sizes and JSON, each refusal naming its field and limit.

Pure checks over plain values; the dispatcher calls them before it changes anything.
"""

from __future__ import annotations

import difflib
import hmac
import json
import re
import time
from collections.abc import Iterable, Mapping

from flux import defaults
from flux.domain.execution import utf8_bytes
from flux.domain.labels import validate_labels
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.domain.workflow import WorkflowRecord
from flux.errors import InvalidArgument, ResourceExhausted
from flux.workflow import validate_name, validate_priority

# Checked with fullmatch: "$" also matches before a final newline, so "w1\n" would pass re.match.
WORKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
SOURCE_HASH = re.compile(r"[0-9a-f]{64}")
WORKER_NAME_FORM = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
MAX_CAPACITY = defaults.MAX_BATCH_ITEMS
# Executions a worker may queue beyond its room (--prefetch): a few bodies of slack, not a backlog.
MAX_PREFETCH = defaults.MAX_PREFETCH
MAX_ID_LENGTH = 128
MAX_BATCH_ITEMS = defaults.MAX_BATCH_ITEMS
# Size limits: each refusal names the limit it hit.
MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_JSON_BYTES = 4 * 1024 * 1024
# Inputs of one RunWorkflows call; a caller with more sends several calls.
MAX_BATCH_INPUTS = defaults.MAX_BATCH_INPUTS
MAX_WORKER_PACKAGES = 20_000
MAX_MARKERS = 64
MAX_RUNTIMES = 16
MAX_TEXT = 256
RUNTIME_NAME = re.compile(r"[a-z][a-z0-9_.+-]{0,31}")
RUNTIME_FORM = "1-32 lowercase letters, digits, '_', '.', '+' or '-', starting with a letter, e.g. python"


def check_workflow_file(filename: str, source: str, workflows: list[WorkflowRecord]) -> None:
    """A registration: a non-empty source within its limit, and each workflow's fields."""
    if not source.strip():
        raise InvalidArgument("source is empty; send the whole Python file that defines the workflows")
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise ResourceExhausted(
            f"source is larger than the {MAX_SOURCE_BYTES} byte limit for a workflow file"
        )
    if len(filename) > MAX_TEXT:
        raise InvalidArgument(f"filename is longer than {MAX_TEXT} characters")
    if not workflows:
        raise InvalidArgument("workflows is empty; the file must define at least one @workflow")
    seen: set[str] = set()
    for position, wf in enumerate(workflows):
        field = f"workflows[{position}]"
        try:
            validate_name(wf.name, f"{field}.name")
            validate_labels(dict(wf.affinity), f"{field}.affinity")
            validate_priority(wf.priority, f"{field}.priority")
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        if not RUNTIME_NAME.fullmatch(wf.runtime):
            raise InvalidArgument(f"{field}.runtime {wf.runtime!r} is invalid; a runtime is {RUNTIME_FORM}")
        if not wf.entrypoint.isidentifier():
            raise InvalidArgument(f"{field}.entrypoint {wf.entrypoint!r} is not a Python identifier")
        if not 1 <= wf.max_attempts <= 100:
            raise InvalidArgument(f"{field}.max_attempts must be between 1 and 100; got {wf.max_attempts}")
        if wf.name in seen:
            raise InvalidArgument(f"{field}.name {wf.name!r} appears twice in one file")
        seen.add(wf.name)


def check_source_hash(source_hash: str) -> None:
    if not SOURCE_HASH.fullmatch(source_hash):
        raise InvalidArgument(
            f"source_hash must be 64 lowercase hex characters (sha256); got {source_hash!r}"
        )


def check_batch(items: int, field: str) -> None:
    if items == 0:
        raise InvalidArgument(f"{field} is empty; send at least one item")
    if items > MAX_BATCH_ITEMS:
        raise InvalidArgument(f"{field} has {items} entries; at most {MAX_BATCH_ITEMS} per call")


def check_id(execution_id: str) -> None:
    if not execution_id or len(execution_id) > MAX_ID_LENGTH:
        raise InvalidArgument(f"execution_id must be 1-{MAX_ID_LENGTH} characters; got {execution_id!r:.80}")


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity; JSON (and every other reader of the result) does not.
    raise ValueError(f"{name} is not JSON")


# One decoder for every check (json.loads with an argument makes a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def checked_priority(priority: int) -> int:
    try:
        return validate_priority(priority)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def checked_json(text: str, field: str) -> str:
    if utf8_bytes(text) > MAX_JSON_BYTES:
        raise ResourceExhausted(f"{field} is larger than the {MAX_JSON_BYTES} byte limit")
    try:
        _DECODER.decode(text)
    except ValueError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgument(f"{field} nests too deeply") from None
    return text


def checked_inputs(inputs: list[str], field: str) -> list[str]:
    """A batch of inputs (empty means null), each checked as one RunWorkflow input, named by index."""
    if not inputs:
        raise InvalidArgument(f"{field} is empty; give at least one input (an empty string means null)")
    if len(inputs) > MAX_BATCH_INPUTS:
        raise ResourceExhausted(
            f"{field} has {len(inputs)} inputs; the limit is {MAX_BATCH_INPUTS} per call: send the rest in "
            "further calls"
        )
    scan, most, checked = _DECODER.scan_once, MAX_JSON_BYTES, []
    for index, text in enumerate(inputs):
        text = text or "null"
        # The common case at C speed: one JSON value from the first character to the last (what
        # checked_json accepts, less its whitespace). Anything else goes through checked_json.
        try:
            whole = utf8_bytes(text) <= most and scan(text, 0)[1] == len(text)
        except (ValueError, RecursionError, StopIteration):
            whole = False
        checked.append(text if whole else checked_json(text, f"{field}[{index}]"))
    return checked


ADDRESS_FORM = "a host name or IP address, optionally with :PORT, at most 255 characters, no spaces"


def checked_address(address: str) -> str:
    """A worker's advertised address (``--advertise-address``), as gang members will dial it."""
    if len(address) > 255 or any(c.isspace() or not c.isprintable() for c in address):
        raise InvalidArgument(f"advertise_address {address[:60]!r} is invalid; it is {ADDRESS_FORM}")
    return address


def check_worker(name: str, capacity: int, default_capacity: int, prefetch: int = 0) -> None:
    if not WORKER_NAME.fullmatch(name):
        raise InvalidArgument(f"name {name!r} is invalid; a worker name is {WORKER_NAME_FORM}")
    if not 0 <= capacity <= MAX_CAPACITY:
        raise InvalidArgument(
            f"capacity must be between 1 and {MAX_CAPACITY} (0 means {default_capacity}); got {capacity}"
        )
    if not 0 <= prefetch <= MAX_PREFETCH:
        raise InvalidArgument(
            f"prefetch must be between 0 and {MAX_PREFETCH} (executions queued beyond the worker's room); "
            f"got {prefetch}"
        )


def check_software(software: WorkerSoftware | None) -> None:
    if software is None:
        return
    if len(software.packages) > MAX_WORKER_PACKAGES:
        raise ResourceExhausted(
            f"software.packages lists {len(software.packages)} distributions; the limit is {MAX_WORKER_PACKAGES}"
        )
    if len(software.runtimes) > MAX_RUNTIMES:
        raise ResourceExhausted(f"software.runtimes lists more than {MAX_RUNTIMES} runtimes")
    for position, runtime in enumerate(software.runtimes):
        name = runtime.split(None, 1)[0] if runtime.strip() else ""
        if len(runtime) > 64 or not RUNTIME_NAME.fullmatch(name):
            raise InvalidArgument(
                f'software.runtimes[{position}] {runtime[:64]!r} is invalid; give "NAME" or "NAME VERSION" '
                f"(at most 64 characters), NAME being {RUNTIME_FORM}"
            )
    if len(software.marker_environment) > MAX_MARKERS:
        raise ResourceExhausted(f"software.marker_environment has more than {MAX_MARKERS} entries")
    for name, version in software.packages.items():
        if not name or len(name) > MAX_TEXT or len(version) > MAX_TEXT:
            raise InvalidArgument(
                f"software.packages entry {name[:MAX_TEXT]!r} needs a name and version of 1-{MAX_TEXT} characters"
            )


def check_metadata(
    labels: Mapping[str, str], software: WorkerSoftware | None, resources: WorkerResources, limit: int
) -> None:
    """Labels, packages, markers and GPU names of one worker, within ``limit`` bytes."""
    size = sum(utf8_bytes(k) + utf8_bytes(v) for k, v in labels.items())
    if software is not None:
        size += sum(utf8_bytes(k) + utf8_bytes(v) for k, v in software.packages.items())
        size += sum(utf8_bytes(k) + utf8_bytes(v) for k, v in software.marker_environment.items())
    size += sum(utf8_bytes(g.uuid) + utf8_bytes(g.name) for g in resources.gpus)
    if size > limit:
        raise ResourceExhausted(
            f"labels, packages, markers and GPU names take {size} bytes; the limit is "
            f"{limit} per worker (--max-worker-metadata)"
        )


def same_token(given: str, expected: str) -> bool:
    # Bytes, not str: compare_digest refuses non-ASCII str, and a token is whatever a caller sends.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'hello'?`` for a near miss among the registered names, else ""."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def name_held(name: str, frees_at: float) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(frees_at))
    return (
        f"worker name {name!r} belongs to a worker whose stream dropped; it keeps the name for its grace "
        f"period, until {when}, unless it reconnects with its session token. To free it now, an operator "
        f"runs 'flux worker forget {name}'"
    )
