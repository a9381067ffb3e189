"""The chaos fault scheduler over fake targets: seeded rounds of every kind, each fault undone."""

from __future__ import annotations

from bench.chaos import faults
from bench.chaos.faults import Scheduler


class FakeProxy:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def cut(self) -> int:
        self.calls.append("cut")
        return 0

    def stall(self, seconds: float) -> None:
        self.calls.append("stall")

    def delay(self, milliseconds: float, seconds: float) -> None:
        self.calls.append("delay")

    def half_open(self, seconds: float) -> None:
        self.calls.append("half_open")

    def restore(self) -> None:
        self.calls.append("restore")


class FakeTargets:
    def __init__(self, servers: int = 1) -> None:
        self.workers = [f"w{i}" for i in range(6)]
        self.servers = servers
        self.proxies = {"grpc-0": FakeProxy(), "http-0": FakeProxy()}
        self.calls: list[tuple[str, object]] = []
        self.restart_fails = 0  # restart_server raises this many times first

    def kill_worker(self, name: str) -> None:
        self.calls.append(("kill_worker", name))

    def start_worker(self, name: str) -> None:
        self.calls.append(("start_worker", name))

    def stop_worker(self, name: str) -> None:
        self.calls.append(("stop_worker", name))

    def continue_worker(self, name: str) -> None:
        self.calls.append(("continue_worker", name))

    def kill_server(self, index: int) -> None:
        self.calls.append(("kill_server", index))

    def restart_server(self, index: int) -> None:
        if self.restart_fails:
            self.restart_fails -= 1
            raise RuntimeError("the database is stopped")
        self.calls.append(("restart_server", index))

    def pause_store(self) -> None:
        self.calls.append(("pause_store", None))

    def resume_store(self) -> None:
        self.calls.append(("resume_store", None))


def _scheduler(seed: int, targets: FakeTargets, kinds: tuple[str, ...]) -> Scheduler:
    # Faults every few milliseconds: every undo (1 s and more away) is left for finish().
    return Scheduler(seed, targets, kinds, gap_s=(0.001, 0.002))


def test_the_first_round_injects_every_kind_once_and_the_seed_decides_the_order() -> None:
    orders = []
    for _ in range(2):
        scheduler = _scheduler(42, FakeTargets(), faults.SQLITE_KINDS)
        scheduler.run(0.3)
        scheduler.finish()
        first = [step for step in scheduler.trail if step.fault][: len(faults.SQLITE_KINDS)]
        assert sorted(step.kind for step in first) == sorted(faults.SQLITE_KINDS)
        orders.append([(step.kind, step.target, step.params) for step in first])
    assert orders[0] == orders[1]
    other = _scheduler(43, FakeTargets(), faults.SQLITE_KINDS)
    other.run(0.3)
    other.finish()
    assert [(s.kind, s.target, s.params) for s in other.trail if s.fault][:7] != orders[0]


def test_every_fault_is_undone_by_finish_and_two_workers_stay_healthy() -> None:
    targets = FakeTargets(servers=3)
    scheduler = _scheduler(7, targets, faults.POSTGRES_KINDS)
    scheduler.run(0.5)
    down_at_once = 0
    down: set[str] = set()
    for call, target in targets.calls:
        if call in ("kill_worker", "stop_worker"):
            down.add(str(target))
        down_at_once = max(down_at_once, len(down))
    assert down_at_once <= len(targets.workers) - faults.KEEP_HEALTHY
    before_finish = len(targets.calls)
    scheduler.finish()
    calls = targets.calls
    for call, target in list(calls):
        undo = {"kill_worker": "start_worker", "stop_worker": "continue_worker", "kill_server": "restart_server",
                "pause_store": "resume_store"}.get(call)  # fmt: skip
        if undo is not None:
            assert (undo, target) in calls[calls.index((call, target)) :], f"{call} {target} never undone"
    # A replica cannot start while PostgreSQL is stopped: finish() resumes it first.
    at_finish = [call for call, _ in calls[before_finish:]]
    assert "resume_store" in at_finish and "restart_server" in at_finish
    assert at_finish.index("resume_store") < at_finish.index("restart_server")
    assert all(proxy.calls[-1] == "restore" for proxy in targets.proxies.values())
    counts = scheduler.counts()
    assert set(counts) == set(faults.POSTGRES_KINDS) and sum(counts.values()) == sum(
        1 for step in scheduler.trail if step.fault
    )


def test_a_failed_restart_is_retried_and_reported_only_when_it_never_works() -> None:
    targets = FakeTargets()
    targets.restart_fails = 1
    scheduler = _scheduler(1, targets, ("server_kill",))
    # Long enough that a loaded machine still sees the first kill (due 1-2 ms in) before the end.
    scheduler.run(0.3)
    scheduler.finish()
    assert ("restart_server", 0) in targets.calls
    assert scheduler.errors == []
