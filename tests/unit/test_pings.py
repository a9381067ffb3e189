"""Keepalive pings follow each stream's own clock (flux/dispatcher/state/pings.py), and an SSE stream gets one ping per interval.

Times are passed in: nothing here sleeps.
"""

from __future__ import annotations

from flux.dispatcher.state.pings import Pinger
from flux.dispatcher.state.session import Ping, Session
from gateway.wire.stream import _own_ping_after

INTERVAL = 10.0


def _pings(session: Session) -> int:
    return sum(isinstance(event, Ping) for event in session.take(1000))


def _session(name: str, last_sent: float) -> Session:
    session = Session(name, "grpc", {})
    session.last_sent = last_sent
    return session


def test_streams_opened_together_are_pinged_at_spread_times_not_in_one_step() -> None:
    jitters = iter([i / 100 for i in range(100)])
    pinger = Pinger(lambda: INTERVAL, jitter=lambda: next(jitters))
    sessions = [_session(f"w{i}", 0.0) for i in range(100)]
    for session in sessions:
        pinger.watch(session)
    # First pings fall over the second half of the first interval: a fifth of them per 1 s step.
    per_step = [pinger.ping_due(float(t), float(t)) for t in range(1, 11)]
    assert sum(per_step) == 100
    assert per_step[:4] == [0, 0, 0, 0] and max(per_step) <= 20
    assert all(_pings(s) == 1 for s in sessions)


def test_a_stream_is_pinged_once_per_interval_of_silence_and_not_while_it_carries_traffic() -> None:
    pinger = Pinger(lambda: INTERVAL, jitter=lambda: 1.0)
    busy, idle = _session("busy", 0.0), _session("idle", 0.0)
    pinger.watch(busy)
    pinger.watch(idle)
    busy.last_sent = 9.0  # a dispatch went out just before its ping fell due
    assert pinger.ping_due(10.0, 10.0) == 1
    assert (_pings(busy), _pings(idle)) == (0, 1)
    assert pinger.ping_due(18.9, 18.9) == 0
    assert pinger.ping_due(19.0, 19.0) == 1  # busy: 10 s after its dispatch
    assert (_pings(busy), _pings(idle)) == (1, 0)
    busy.last_sent = 19.0
    assert pinger.ping_due(20.0, 20.0) == 1  # idle: 10 s after its ping
    assert _pings(idle) == 1


def test_a_step_pings_in_turns_of_at_most_most_and_the_last_turn_says_none_is_left() -> None:
    pinger = Pinger(lambda: INTERVAL, jitter=lambda: 0.0)
    sessions = [_session(f"w{i}", 0.0) for i in range(20)]
    for session in sessions:
        pinger.watch(session)
    # What the ping task does each step: turns of 8 until one pings fewer.
    turns = [pinger.ping_due(5.0, 5.0, 8) for _ in range(4)]
    assert turns == [8, 8, 4, 0]
    assert all(_pings(s) == 1 for s in sessions)
    assert pinger.ping_due(14.9, 14.9, 8) == 0  # each is next due one interval after its ping


def test_a_closed_stream_leaves_the_schedule() -> None:
    pinger = Pinger(lambda: INTERVAL, jitter=lambda: 0.0)
    session = _session("gone", 0.0)
    pinger.watch(session)
    session.close()
    assert pinger.ping_due(100.0, 100.0) == 0
    assert len(pinger) == 0


def test_the_gateway_relays_the_cores_pings_and_adds_its_own_only_when_one_is_late() -> None:
    # The core pings every 15 s and so would the gateway: only the core's pings go out.
    assert _own_ping_after(15.0, 15_000) == 22.5
    # A gateway set to ping more often than the core pings on its own schedule.
    assert _own_ping_after(0.3, 15_000) == 0.3
    # A core that does not say how often it pings.
    assert _own_ping_after(15.0, 0) == 15.0
