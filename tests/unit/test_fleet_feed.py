"""The fleet feed: the dispatcher tells WatchFleet's listeners each change, in order."""

from __future__ import annotations

import pytest

from flux.domain.execution import State
from flux.observe.fleet import Change, FleetFeed
from tests.unit.harness import Flux, committed, resources

pytestmark = pytest.mark.timeout(10)


def listen(flux: Flux) -> list[tuple[Change, str, object]]:
    heard: list[tuple[Change, str, object]] = []

    def listener(change: Change, subject: object) -> None:
        if change.about_worker:
            heard.append((change, subject.name, (subject.draining, subject.paused)))  # type: ignore[attr-defined]
        else:
            heard.append((change, subject.execution_id, subject.state))  # type: ignore[attr-defined]

    flux.d.events.fleet.subscribe(listener)
    return heard


async def test_every_change_of_a_worker_and_an_execution(flux: Flux) -> None:
    await flux.workflow()
    heard = listen(flux)
    worker = await flux.worker("w1")
    first = await flux.run()
    worker.claim(first)
    await worker.complete(first)
    await committed()
    worker.report(resources())
    worker.report(resources(), draining=True)
    await flux.d.set_paused("w1", True)
    await flux.d.set_paused("w1", False)
    worker.disconnect()
    assert heard == [
        (Change.WORKER_CONNECTED, "w1", (False, False)),
        (Change.EXECUTION_QUEUED, first, State.CREATED),
        (Change.EXECUTION_DISPATCHED, first, State.SCHEDULED),
        (Change.EXECUTION_FINISHED, first, State.COMPLETED),
        (Change.WORKER_REPORTED, "w1", (False, False)),
        (Change.WORKER_DRAINING, "w1", (True, False)),
        (Change.WORKER_PAUSED, "w1", (True, True)),
        (Change.WORKER_RESUMED, "w1", (True, False)),
        (Change.WORKER_DISCONNECTED, "w1", (True, False)),
    ]


async def test_a_dispatch_not_claimed_in_time_is_queued_again_as_created(flux: Flux) -> None:
    await flux.workflow()
    await flux.worker("w1")
    heard = listen(flux)
    expired = await flux.run()
    flux.expire(advance=60)  # past the ack deadline
    assert heard == [
        (Change.EXECUTION_QUEUED, expired, State.CREATED),
        (Change.EXECUTION_DISPATCHED, expired, State.SCHEDULED),
        (Change.EXECUTION_QUEUED, expired, State.CREATED),
    ]


def test_publishing_to_nobody_does_nothing_and_unsubscribe_stops_calls() -> None:
    feed = FleetFeed()
    assert not feed
    feed.publish(Change.WORKER_CONNECTED, object())
    calls: list[Change] = []
    stop = feed.subscribe(lambda change, subject: calls.append(change))
    assert feed
    feed.publish(Change.EXECUTION_QUEUED, object())
    stop()
    stop()  # twice is harmless
    feed.publish(Change.EXECUTION_QUEUED, object())
    assert calls == [Change.EXECUTION_QUEUED] and not feed


class _Aborted(Exception):
    pass


class _Context:
    """The part of a servicer context WatchFleet uses."""

    def __init__(self) -> None:
        self.status: tuple[object, str] | None = None

    async def abort(self, code: object, message: str) -> None:
        self.status = (code, message)
        raise _Aborted


async def test_a_fleet_watch_that_falls_behind_is_dropped(
    flux: Flux, monkeypatch: pytest.MonkeyPatch
) -> None:
    import grpc

    from flux.server import control_service, fleet_watch
    from flux.v1 import control_pb2

    monkeypatch.setattr(fleet_watch, "FLEET_BACKLOG", 3)
    await flux.workflow()
    context = _Context()
    watch = control_service.ControlService(flux.d).WatchFleet(control_pb2.WatchFleetRequest(), context)
    first = await anext(watch)
    assert first.sequence == 1 and first.WhichOneof("event") == "workers"
    for _ in range(5):  # nobody reads: the third unread event is the limit
        await flux.run()
    assert not flux.d.events.fleet, "dropped at once, not when it reads again"
    kinds = []
    with pytest.raises(_Aborted):
        async for event in watch:
            kinds.append((event.sequence, event.WhichOneof("event")))
    assert kinds == [(2, "execution_queued"), (3, "execution_queued"), (4, "execution_queued")]
    assert context.status is not None and context.status[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "fell 3 events behind" in context.status[1]
