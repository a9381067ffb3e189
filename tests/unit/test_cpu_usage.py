"""CPU observation fair to itself: a window of cumulative counters, the worker's own CPU not counted as load."""

from __future__ import annotations

import threading
from collections import namedtuple
from types import SimpleNamespace

import pytest

from flux.worker.cpu_usage import (
    CPU_SAMPLE_SECONDS,
    Counters,
    PsutilCounters,
    WindowedCpu,
    foreign_fraction,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Machine:
    """Cumulative counters of a fake machine with ``cores`` cores, advanced by ``run``."""

    def __init__(self, clock: Clock, cores: int = 4) -> None:
        self.clock = clock
        self.cores = cores
        self.counters = Counters(0.0, 0.0, 0.0)
        self.reads = 0

    def run(self, seconds: float, busy_cores: float, own_cores: float = 0.0) -> None:
        """``busy_cores`` are busy in all (the worker's ``own_cores`` among them) for ``seconds``."""
        c = self.counters
        self.counters = Counters(
            c.total + seconds * self.cores, c.busy + seconds * busy_cores, c.own + seconds * own_cores
        )
        self.clock.now += seconds

    def read(self) -> Counters:
        self.reads += 1
        return self.counters


@pytest.fixture
def machine() -> Machine:
    return Machine(Clock())


def windowed(machine: Machine, window: float = 5.0) -> WindowedCpu:
    return WindowedCpu(machine, window, clock=machine.clock, sleep=machine.clock.sleep)


@pytest.mark.parametrize(
    ("base", "current", "fraction"),
    [
        pytest.param(Counters(0, 0, 0), Counters(40, 20, 0), 0.5, id="half busy, none of it ours"),
        pytest.param(Counters(0, 0, 0), Counters(40, 20, 10), 0.25, id="our 10 s of 20 s busy are not load"),
        pytest.param(Counters(0, 0, 0), Counters(40, 20, 20), 0.0, id="all busy time is ours"),
        pytest.param(Counters(0, 0, 5), Counters(40, 20, 0), 0.5, id="own counter stepping back counts as 0"),
        pytest.param(
            Counters(0, 0, 0), Counters(40, 10, 30), 0.0, id="own above busy (clock skew) clamps at 0"
        ),
        pytest.param(Counters(0, 0, 0), Counters(40, 40, 0), 1.0, id="saturated"),
        pytest.param(Counters(10, 5, 0), Counters(10, 5, 0), 0.0, id="no time passed"),
    ],
)
def test_foreign_fraction(base: Counters, current: Counters, fraction: float) -> None:
    assert foreign_fraction(base, current) == pytest.approx(fraction)


def test_first_reading_waits_once_for_a_real_figure(machine: Machine) -> None:
    cpu = windowed(machine)
    machine.run(0, 0)
    original = machine.read

    def read() -> Counters:
        # Load appears while the first reading waits.
        if machine.reads == 1:
            machine.counters = Counters(machine.counters.total + 0.4, machine.counters.busy + 0.2, 0)
        return original()

    machine.read = read  # type: ignore[method-assign]
    assert cpu.busy_fraction() == pytest.approx(0.5)
    assert machine.clock.sleeps == [CPU_SAMPLE_SECONDS]
    machine.run(1, 0)
    cpu.busy_fraction()
    assert machine.clock.sleeps == [CPU_SAMPLE_SECONDS]  # never again


def test_a_burst_is_averaged_over_the_window_not_seen_at_its_peak(machine: Machine) -> None:
    cpu = windowed(machine, window=5.0)
    cpu.busy_fraction()
    for _ in range(4):
        machine.run(1, 0)  # idle
        cpu.busy_fraction()
    machine.run(1, 4)  # one second of every core busy
    # Over the last 5 s: 4 busy core-seconds of 20.
    assert cpu.busy_fraction() == pytest.approx(4 / 20)


def test_the_window_forgets_load_older_than_it(machine: Machine) -> None:
    cpu = windowed(machine, window=5.0)
    cpu.busy_fraction()
    machine.run(2, 4)  # saturated, long ago
    cpu.busy_fraction()
    for _ in range(3):
        machine.run(1, 0)
        cpu.busy_fraction()
    machine.run(1, 0)
    assert cpu.busy_fraction() == pytest.approx(8 / 24)  # 4 s idle: the window still reaches the load
    machine.run(1, 0)
    assert cpu.busy_fraction() == 0.0  # 5 s idle: the window starts where the load ended


def test_the_workers_own_executions_are_not_load(machine: Machine) -> None:
    # The case: a cpu=1 execution on an otherwise idle 4-core box. Its core is
    # reserved by the dispatcher already; the report must not say the box is busy too.
    cpu = windowed(machine)
    cpu.busy_fraction()
    machine.run(3, busy_cores=1, own_cores=1)
    assert cpu.busy_fraction() == 0.0
    machine.run(3, busy_cores=3, own_cores=1)  # and two cores of somebody else's load
    # The window is 100.1 -> 106.1: 12 busy core-seconds of 24, 6 of them ours.
    assert cpu.busy_fraction() == pytest.approx(6 / 24)


def test_readings_closer_than_the_minimum_reuse_the_last_figure(machine: Machine) -> None:
    cpu = windowed(machine)
    cpu.busy_fraction()
    machine.run(1, 2)
    first = cpu.busy_fraction()
    reads = machine.reads
    machine.run(0.01, 4)
    assert cpu.busy_fraction() == first and machine.reads == reads


def test_concurrent_readers_share_one_window() -> None:
    clock = Clock()
    machine = Machine(clock)
    cpu = windowed(machine)
    results: list[float] = []
    threads = [threading.Thread(target=lambda: results.append(cpu.busy_fraction())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert len(results) == 8 and clock.sleeps == [CPU_SAMPLE_SECONDS]


# --- psutil counters -------------------------------------------------------------------------------

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
ProcTimes = namedtuple("ProcTimes", "user system children_user children_system")


class FakeProcess:
    def __init__(
        self, times: ProcTimes, children: list[FakeProcess] | None = None, gone: bool = False
    ) -> None:
        self.times, self._children, self.gone = times, children or [], gone

    def cpu_times(self) -> ProcTimes:
        if self.gone:
            raise FakeError("process ended")
        return self.times

    def children(self, recursive: bool = False) -> list[FakeProcess]:
        assert recursive, "grandchildren (a shell's compiler) are the worker's work too"
        return self._children


class FakeError(Exception):
    pass


def test_psutil_counters_sum_host_times_and_the_worker_tree() -> None:
    child = FakeProcess(ProcTimes(2.0, 1.0, 0.5, 0.0))
    grandchild = FakeProcess(ProcTimes(1.0, 0.0, 0.0, 0.0))
    ended = FakeProcess(ProcTimes(9.0, 9.0, 0, 0), gone=True)
    me = FakeProcess(ProcTimes(3.0, 1.0, 4.0, 1.0), [child, grandchild, ended])
    fake = SimpleNamespace(
        cpu_times=lambda: Times(10.0, 1.0, 4.0, 80.0, 5.0, 0.0, 0.0, 0.0, 2.0, 0.0),
        Process=lambda: me,
        Error=FakeError,
    )
    counters = PsutilCounters(fake).read()
    # total excludes guest (already in user); busy excludes idle and iowait.
    assert counters.total == pytest.approx(100.0)
    assert counters.busy == pytest.approx(15.0)
    assert counters.own == pytest.approx(9.0 + 3.5 + 1.0)


def test_psutil_counters_on_the_real_machine_are_cumulative() -> None:
    import psutil

    counters = PsutilCounters(psutil)
    # "own" counts this process's children too: one that ends between the reads takes its time
    # with it (another test's leftover, under a full run), so a try may see it fall; not three.
    for _ in range(3):
        first = counters.read()
        sum(i * i for i in range(200_000))  # some CPU of our own
        second = counters.read()
        if second.own > first.own:
            break
    assert second.total >= first.total and second.busy >= first.busy and second.own > first.own
    assert 0.0 <= WindowedCpu(counters).busy_fraction() <= 1.0


def test_a_zero_window_reads_since_the_previous_sample(machine: Machine) -> None:
    # The earlier reading (psutil's cpu_percent since the last call), which the bench compares against.
    cpu = windowed(machine, window=0.0)
    cpu.busy_fraction()
    machine.run(2, 4)
    assert cpu.busy_fraction() == 1.0
    machine.run(2, 0)
    assert cpu.busy_fraction() == 0.0


def test_simulated_foreign_load_is_a_checked_fraction():
    from flux.worker.cpu_usage import SimulatedCpu

    assert SimulatedCpu("0").busy_fraction() == 0.0
    assert SimulatedCpu("0.25").busy_fraction() == 0.25
    for bad in ("1.5", "-0.1", "busy", "nan"):
        with pytest.raises(ValueError, match=r"FLUX_SIMULATED_CPU_BUSY must be a fraction from 0 to 1"):
            SimulatedCpu(bad)
