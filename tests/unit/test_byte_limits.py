"""Every byte limit counts UTF-8 bytes, not characters; a fleet watcher's backlog is bounded in bytes.

An outside review registered a GPU named with 260,000 emoji (1,040,205 bytes) under the 256 KiB
--max-worker-metadata, which then counted ``len(str)``: one emoji is one character and four bytes.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from flux.dispatcher.core import WorkerRegistration
from flux.dispatcher.state import validation
from flux.domain.worker import Gpu, WorkerSoftware
from flux.errors import ResourceExhausted
from flux.server import control_service, fleet_watch
from flux.v1 import control_pb2
from tests.unit.harness import SETTINGS, Flux, resources

pytestmark = pytest.mark.timeout(10)

EMOJI = "\N{GRINNING FACE}"  # 1 character, 4 bytes


def limited(flux: Flux, **settings: int) -> None:
    flux.d.settings = dataclasses.replace(SETTINGS, **settings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("abc", 3), (EMOJI, 4), ("é", 2), (EMOJI * 3 + "a", 13)],
    ids=["empty", "ascii", "emoji", "two-byte", "mixed"],
)
def test_utf8_bytes(text, expected):
    assert validation.utf8_bytes(text) == expected == len(text.encode())


async def test_worker_metadata_limit_counts_bytes_of_gpu_names(flux):
    limited(flux, max_worker_metadata=1000)
    # 300 characters, 1200 bytes: over a 1000-byte limit.
    gpus = (Gpu(index=0, uuid="GPU-0", name=EMOJI * 300, memory_total=1, memory_free=1),)
    heavy = dataclasses.replace(resources(), gpus=gpus)
    with pytest.raises(ResourceExhausted, match=r"take 1205 bytes; the limit is 1000 per worker"):
        await flux.d.register_worker(WorkerRegistration("w1", heavy, WorkerSoftware(), {}))
    w = await flux.worker("w1")
    with pytest.raises(ResourceExhausted, match="--max-worker-metadata"):
        flux.d.report("w1", w.token, heavy, None, False)


async def test_worker_metadata_limit_counts_bytes_of_packages(flux):
    limited(flux, max_worker_metadata=1000)
    # 404 characters, 1604 bytes.
    software = WorkerSoftware({f"p{i}": EMOJI * 200 for i in range(2)}, {})
    with pytest.raises(ResourceExhausted, match=r"take 1604 bytes"):
        await flux.d.register_worker(WorkerRegistration("w1", resources(), software, {}))


def test_json_limit_counts_bytes(monkeypatch):
    monkeypatch.setattr(validation, "MAX_JSON_BYTES", 10)
    assert validation.checked_json('"abcdefgh"', "input_json")  # 10 bytes: at the limit
    with pytest.raises(ResourceExhausted, match="input_json is larger than the 10 byte limit"):
        validation.checked_json(f'"{EMOJI * 3}"', "input_json")  # 5 characters, 14 bytes


async def test_pending_bytes_count_utf8_bytes(flux):
    limited(flux, max_pending_bytes=20)
    await flux.workflow()
    await flux.run(input_json=f'"{EMOJI * 4}"')  # 18 bytes (6 characters)
    with pytest.raises(ResourceExhausted, match=r"hold 18 input bytes; this input of 6 bytes"):
        await flux.run(input_json=f'"{EMOJI}"')


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.status: tuple[object, str] | None = None

    async def abort(self, code: object, message: str) -> None:
        self.status = (code, message)
        raise _Aborted


async def test_a_fleet_watch_is_dropped_past_its_byte_backlog(flux, monkeypatch):
    # Few events, far under the count limit, but over the byte limit: dropped all the same.
    monkeypatch.setattr(fleet_watch, "FLEET_BACKLOG_BYTES", 1)
    await flux.workflow()
    context = _Context()
    watch = control_service.ControlService(flux.d).WatchFleet(control_pb2.WatchFleetRequest(), context)
    first = await anext(watch)
    assert first.WhichOneof("event") == "workers"  # the snapshot does not count
    for _ in range(3):  # nobody reads: the first unread event holds the one byte allowed
        await flux.run()
    assert not flux.d.events.fleet, "dropped at once, not when it reads again"
    kinds = []
    with pytest.raises(_Aborted):
        async for event in watch:
            kinds.append((event.sequence, event.WhichOneof("event")))
    assert kinds == [(2, "execution_queued")]
    assert context.status is not None and context.status[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert context.status[1] == "this fleet watch fell 1 bytes of events behind and was dropped; watch again"


async def test_a_fleet_watch_that_reads_frees_its_byte_backlog(flux, monkeypatch):
    monkeypatch.setattr(fleet_watch, "FLEET_BACKLOG_BYTES", 1)
    await flux.workflow()
    context = _Context()
    watch = control_service.ControlService(flux.d).WatchFleet(control_pb2.WatchFleetRequest(), context)
    await anext(watch)
    for sequence in range(2, 6):  # one at a time, each read before the next: never behind
        await flux.run()
        assert (await anext(watch)).sequence == sequence
    assert flux.d.events.fleet and context.status is None
    await watch.aclose()
