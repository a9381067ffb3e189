"""Aging and priorities in the pure matcher: nominated workers, backfill beside them, priority order.

The property tests run a small discrete-time cluster: executions arrive,
the scheduler places them, each runs for a few ticks and frees its room.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flux.matching import Aging, PendingQueue, explain, format_wait, schedule
from flux.matching.reasons import Reason
from tests.unit.fleet import shape, worker

ONE, FOUR = shape(cpu=1), shape(cpu=4)


def ids(placements):
    return [p.execution_id for p in placements]


# ---- priorities ---------------------------------------------------------------------------------


def test_higher_priority_first_within_a_shape_fifo_among_equals():
    queue = PendingQueue()
    queue.add("low-old", ONE, 1, priority=0)
    queue.add("high-young", ONE, 2, priority=5)
    queue.add("low-young", ONE, 3, priority=0)
    queue.add("high-younger", ONE, 4, priority=5)
    assert [p.execution_id for p in queue.iter_shape(ONE)] == [
        "high-young",
        "high-younger",
        "low-old",
        "low-young",
    ]
    assert queue.position("low-old") == 2 and queue.position("high-younger") == 1
    assert queue.oldest(ONE).execution_id == "low-old"
    placements = schedule(queue, [worker("w", cpu=2)])
    assert ids(placements) == ["high-young", "high-younger"]


def test_higher_priority_of_another_shape_takes_the_contended_worker():
    queue = PendingQueue()
    queue.add("old-low", shape(cpu=3), 1, priority=-1)
    queue.add("young-high", shape(cpu=2), 2, priority=3)
    assert ids(schedule(queue, [worker("w", cpu=4)])) == ["young-high"]


def test_requeued_execution_keeps_its_place_within_its_priority():
    queue = PendingQueue()
    queue.add("b", ONE, 5, priority=1)
    queue.add("c", ONE, 6, priority=1)
    queue.add("a", ONE, 2, priority=1)  # requeued: submitted before b and c
    queue.add("z", ONE, 1, priority=0)
    assert [p.execution_id for p in queue.iter_shape(ONE)] == ["a", "b", "c", "z"]
    queue.remove("a")
    queue.remove("b")
    queue.remove("c")
    assert [p.execution_id for p in queue.iter_shape(ONE)] == ["z"]
    queue.remove("z")
    assert queue.shapes() == [] and len(queue) == 0


# ---- nomination and backfill -------------------------------------------------------------------


def busy(name: str, cpu_total: int, reserved: int, active: int | None = None, **kw):
    return worker(
        name,
        cpu=cpu_total,
        reserved={"cpu": reserved},
        active=reserved if active is None else active,
        cpu_available=cpu_total - reserved,
        **kw,
    )


def test_no_nomination_before_the_threshold():
    aging = Aging(30)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    queue.add("small", ONE, 2, since=0.0)
    placements = schedule(queue, [busy("w", 4, 3)], aging=aging, now=29.0)
    assert ids(placements) == ["small"] and not aging.by_worker


def test_starving_execution_gets_the_worker_with_least_to_free_and_blocks_what_would_delay_it():
    aging = Aging(30)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    queue.add("small", ONE, 2, since=40.0)
    # w1 has 1 core reserved (3 to free up to 4 - less to free than w2's 3 reserved).
    workers = [busy("w1", 4, 1), busy("w2", 4, 3)]
    placements = schedule(queue, workers, aging=aging, now=31.0)
    assert aging.by_execution["big"].worker == "w1"
    # The small one goes to w2: on w1 it would not fit beside the nominee.
    assert [(p.execution_id, p.worker) for p in placements] == [("small", "w2")]


def test_nothing_needing_cores_goes_beside_a_nominee_short_of_cores():
    aging = Aging(30)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    queue.add("small", ONE, 2, since=40.0)
    queue.add("mem", shape(memory="1Gi"), 3, since=40.0)
    placements = schedule(queue, [busy("w", 8, 6)], aging=aging, now=31.0)
    # 6 reserved + 1 + the nominee's 4 is past 8: the small one would delay it. The memory-only
    # one needs nothing the nominee waits for.
    assert ids(placements) == ["mem"] and aging.by_worker["w"].execution_id == "big"


def test_backfill_beside_a_nominee_waiting_for_a_gpu():
    aging = Aging(30)
    queue = PendingQueue()
    gpu_job = shape(cpu=1, gpu=1)
    queue.add("gpu-job", gpu_job, 1, since=0.0)
    queue.add("cpu-job", shape(cpu=2), 2, since=40.0)
    queue.add("other-gpu", shape(gpu=1), 3, since=40.0)
    w = worker("w", cpu=8, gpus=1, held_gpus=[0], reserved={"cpu": 1}, active=1, cpu_available=7)
    placements = schedule(queue, [w], aging=aging, now=31.0)
    assert ids(placements) == ["cpu-job"] and aging.by_worker["w"].execution_id == "gpu-job"


def test_backfill_beside_a_nominee_held_back_by_observed_load():
    aging = Aging(30)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    queue.add("s1", ONE, 2, since=40.0)
    queue.add("s2", ONE, 3, since=40.0)
    queue.add("s3", ONE, 4, since=40.0)
    # 2 reserved, but load from outside Flux leaves 3 cores free: 8 - 2 - 4 = 2 fit beside.
    w = worker("w", cpu=8, reserved={"cpu": 2}, active=2, cpu_available=3)
    placements = schedule(queue, [w], aging=aging, now=31.0)
    assert ids(placements) == ["s1", "s2"] and aging.by_worker["w"].execution_id == "big"


def test_nominee_is_placed_first_when_its_worker_frees_and_nomination_is_dropped():
    aging = Aging(10)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0, priority=-5)
    queue.add("urgent", ONE, 2, since=20.0, priority=100)
    assert schedule(queue, [busy("w", 4, 2)], aging=aging, now=20.0) == []
    assert aging.by_worker["w"].execution_id == "big"
    placements = schedule(queue, [busy("w", 4, 0)], aging=aging, now=21.0)
    assert ids(placements) == ["big"]  # ahead of the higher priority: it has waited past the limit
    queue.remove("big")
    schedule(queue, [busy("w", 4, 4)], aging=aging, now=22.0)
    assert "big" not in aging.by_execution and "w" not in aging.by_worker


def test_other_workers_keep_flowing_and_infeasible_is_not_nominated():
    aging = Aging(5)
    queue = PendingQueue()
    queue.add("huge", shape(cpu=64), 1, since=0.0)
    queue.add("small", ONE, 2, since=0.0)
    placements = schedule(queue, [busy("w", 4, 3)], aging=aging, now=100.0)
    assert ids(placements) == ["small"] and not aging.by_execution


def test_disabled_aging_never_nominates():
    aging = Aging(0)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    queue.add("small", ONE, 2, since=0.0)
    assert ids(schedule(queue, [busy("w", 4, 2)], aging=aging, now=1e9)) == ["small"]
    assert not aging.by_worker


def test_one_nominee_per_worker_the_oldest_first():
    aging = Aging(5)
    queue = PendingQueue()
    queue.add("old", FOUR, 1, since=0.0)
    queue.add("gpu-job", shape(cpu=2, memory="1Gi"), 2, since=1.0)
    assert schedule(queue, [busy("w", 4, 3)], aging=aging, now=60.0) == []
    assert aging.by_worker["w"].execution_id == "old"
    assert "gpu-job" not in aging.by_execution


def test_nomination_to_a_worker_outside_a_partial_pass_is_kept_and_dropped_on_a_whole_fleet_pass():
    aging = Aging(5)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    schedule(queue, [busy("a", 4, 1), busy("b", 4, 3)], aging=aging, now=10.0)
    assert aging.by_execution["big"].worker == "a"
    schedule(queue, [busy("b", 4, 3)], aging=aging, now=11.0, whole_fleet=False)
    assert aging.by_execution["big"].worker == "a"
    schedule(queue, [busy("b", 4, 3)], aging=aging, now=12.0)  # a left the fleet
    assert aging.by_execution["big"].worker == "b"


# ---- explain ------------------------------------------------------------------------------------


def test_explain_names_the_reservation_and_the_nominee_its_worker():
    aging = Aging(30)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    w = busy("w", 4, 3)
    schedule(queue, [w], aging=aging, now=150.0)
    small = explain(ONE, [w], execution_id="small", aging=aging, now=150.0)
    assert small.summary == "0/1 workers can run it: 1 is reserved for big, waiting 2m"
    assert small.verdicts[0].rejections[0].reason is Reason.RESERVED
    assert not small.infeasible
    big = explain(FOUR, [w], execution_id="big", aging=aging, now=150.0)
    assert big.nominated == "w"
    assert "waiting 2m, nominated worker w" in big.summary
    assert [r.reason for r in big.verdicts[0].rejections] == [Reason.CPU]
    # Work that fits beside the nominee is not held back by it.
    roomy = busy("w", 8, 3)
    assert explain(ONE, [roomy], execution_id="small", aging=aging, now=150.0).verdicts[0].fits


def test_format_wait():
    assert [format_wait(s) for s in (0, 59.9, 60, 150, 3599, 3600, 3900, -3)] == [
        "0s", "59s", "1m", "2m", "59m", "1h", "1h 5m", "0s",
    ]  # fmt: skip


# ---- a small cluster over time ------------------------------------------------------------------


@dataclass
class Cluster:
    cpus: list[int]
    aging: Aging | None
    capacity: int = 16
    queue: PendingQueue = field(default_factory=PendingQueue)
    running: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # id -> worker, cpu, ends
    requested: dict[str, int] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    placed_at: dict[str, int] = field(default_factory=dict)
    # worker -> (nominee, ids placed there while it was nominated for that nominee)
    guarded: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    seq: int = 0

    def submit(self, execution_id: str, cpu: int, now: int, priority: int = 0) -> None:
        self.seq += 1
        self.requested[execution_id] = cpu
        self.since[execution_id] = now
        self.queue.add(execution_id, shape(cpu=cpu), self.seq, priority, float(now))

    def views(self):
        out = []
        for i, total in enumerate(self.cpus):
            name = f"w{i}"
            mine = [cpu for w, cpu, _ in self.running.values() if w == name]
            out.append(busy(name, total, sum(mine), len(mine), capacity=self.capacity))
        return out

    def tick(self, now: int, durations: list[int]) -> None:
        for execution_id, (_, _, ends) in list(self.running.items()):
            if ends <= now:
                del self.running[execution_id]
        placements = schedule(self.queue, self.views(), aging=self.aging, now=float(now))
        for n, p in enumerate(placements):
            self.queue.remove(p.execution_id)
            duration = durations[n % len(durations)]
            self.running[p.execution_id] = (p.worker, self.requested[p.execution_id], now + duration)
            self.placed_at[p.execution_id] = now
        self.check(placements, now)

    def check(self, placements, now: int) -> None:
        for i, total in enumerate(self.cpus):
            mine = [cpu for w, cpu, _ in self.running.values() if w == f"w{i}"]
            assert sum(mine) <= total and len(mine) <= self.capacity, "overcommitted"
        if self.aging is None:
            return
        for name, nomination in self.aging.by_worker.items():
            nominee, since = self.guarded.get(name, ("", set()))
            if nominee != nomination.execution_id:
                nominee, since = nomination.execution_id, set()
                self.guarded[name] = (nominee, since)
            # Starving executions are placed ahead of any nomination; the rest placed here is backfill.
            here = {
                p.execution_id
                for p in placements
                if p.worker == name and now - self.since[p.execution_id] < self.aging.after
            }
            since |= here
            beside = [self.running[e] for e in since if e in self.running]
            total = self.cpus[int(name[1:])]
            need = self.requested[nominee]
            # Once what ran before its nomination ends, the nominee fits beside everything placed since.
            assert sum(cpu for _, cpu, _ in beside) + need <= total
            assert len(beside) + 1 <= self.capacity
            # And backfill never takes room it would start in sooner:
            # with it, everything reserved on the worker still leaves the nominee's cores.
            if here:
                reserved = [cpu for w, cpu, _ in self.running.values() if w == name]
                assert sum(reserved) + need <= total
        for name in [n for n in self.guarded if n not in self.aging.by_worker]:
            del self.guarded[name]


arrivals = st.lists(
    st.lists(st.tuples(st.integers(1, 4), st.integers(-3, 3)), min_size=0, max_size=4), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cpus=st.lists(st.integers(2, 6), min_size=1, max_size=3),
    stream=arrivals,
    durations=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    after=st.integers(1, 6),
    big_at=st.integers(0, 3),
    capacity=st.integers(2, 6),
)
def test_an_execution_that_fits_an_idle_worker_is_eventually_placed(
    cpus, stream, durations, after, big_at, capacity
):
    cluster = Cluster(cpus, Aging(after), capacity)
    big = max(cpus)
    max_duration = max(durations)
    older = 0
    horizon = None
    for now in range(400):
        if now == big_at:
            older = len(cluster.queue)
            cluster.submit("big", big, now, priority=-10)
            # Each older starving execution is placed within a run's length of being the oldest.
            horizon = big_at + after + (older + 1) * (max_duration + 1) + 1
        for k, (cpu, priority) in enumerate(stream[now % len(stream)]):
            cluster.submit(f"s{now}-{k}", min(cpu, big), now, priority)
        cluster.tick(now, durations)
        if "big" in cluster.placed_at:
            break
    assert "big" in cluster.placed_at, "never placed"
    assert cluster.placed_at["big"] <= horizon


def run_stream(aging: Aging | None) -> Cluster:
    """One 4-core worker busy with cpu=1 work, a cpu=4 execution behind it, two more cpu=1 a tick."""
    cluster = Cluster([4], aging)
    for k in range(4):
        cluster.submit(f"p{k}", 1, 0)
    cluster.submit("big", 4, 0)
    for now in range(200):
        cluster.submit(f"a{now}", 1, now)
        cluster.submit(f"b{now}", 1, now)
        cluster.tick(now, [2, 3])  # staggered runs: some core is always busy
    return cluster


def test_without_aging_a_steady_small_stream_starves_the_big_one():
    assert "big" not in run_stream(None).placed_at


def test_with_aging_the_big_one_is_placed_once_the_work_before_its_nomination_ends():
    placed = run_stream(Aging(10)).placed_at["big"]
    assert 10 <= placed <= 10 + 3  # nominated at 10, the longest run then ends within 3 ticks


def test_on_a_big_fleet_the_full_search_is_rate_limited_but_nominations_hold():
    aging = Aging(10)
    fleet = [busy(f"w{i:03d}", 4, 3) for i in range(Aging.SMALL_PASS + 1)]
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    assert schedule(queue, fleet, aging=aging, now=20.0) == []
    nominated = aging.by_execution["big"].worker
    # Within the search interval: no new search, but the nominated worker stays guarded...
    queue.add("small", ONE, 2, since=20.0)
    freed = [busy(v.name, 4, 0) if v.name == nominated else v for v in fleet]
    placements = schedule(queue, freed, aging=aging, now=20.1)
    # ...and the nominee is placed there as soon as it fits, before the small one.
    assert [(p.execution_id, p.worker) for p in placements][0] == ("big", nominated)
    queue2 = PendingQueue()
    queue2.add("big2", FOUR, 3, since=0.0)
    # A starving execution with no nomination waits for the next search to be nominated.
    schedule(queue2, fleet, aging=aging, now=20.2)
    assert "big2" not in aging.by_execution
    schedule(queue2, fleet, aging=aging, now=21.5)
    assert "big2" in aging.by_execution


def test_a_pass_for_one_submission_only_guards_standing_nominations():
    aging = Aging(10)
    queue = PendingQueue()
    queue.add("big", FOUR, 1, since=0.0)
    schedule(queue, [busy("a", 4, 1), busy("b", 4, 3)], aging=aging, now=20.0)
    assert aging.by_execution["big"].worker == "a"
    queue.add("new", ONE, 2, since=20.0)
    # a is free enough for the nominee now, but this pass places only what it was asked for,
    # and not on the guarded worker.
    placements = schedule(
        queue, [busy("a", 4, 0), busy("b", 4, 3)], shapes=[ONE], aging=aging, now=21.0, starving_first=False
    )
    assert [(p.execution_id, p.worker) for p in placements] == [("new", "b")]
    assert aging.by_execution["big"].worker == "a"
