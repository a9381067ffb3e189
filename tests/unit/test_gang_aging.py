"""Aging for gangs in the pure matcher (flux.matching.gang_aging): a starving gang is nominated a
worker per member at once, or none; its workers drain; it is placed whole; no two gangs deadlock.

The property runs a small discrete-time cluster as tests/unit/test_aging.py does: small work
arrives every tick, gangs wait behind it, runs end after a few ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.matching import Aging, PendingQueue, Shape, explain, schedule
from tests.unit.fleet import worker


def gang(size: int, cpu: int, same: str | None = None, spread: str | None = None) -> Shape:
    return Shape(ResourceRequest(cpu=cpu), gang=Gang(size, same, spread))


def one(cpu: int) -> Shape:
    return Shape(ResourceRequest(cpu=cpu))


@dataclass
class Cluster:
    cpus: list[int]
    aging: Aging | None
    racks: list[str] | None = None
    queue: PendingQueue = field(default_factory=PendingQueue)
    # id -> (workers, cores per member, ends)
    running: dict[str, tuple[tuple[str, ...], int, int]] = field(default_factory=dict)
    shapes: dict[str, Shape] = field(default_factory=dict)
    placed_at: dict[str, int] = field(default_factory=dict)
    seq: int = 0

    def submit(self, execution_id: str, shape: Shape, now: int) -> None:
        self.seq += 1
        self.shapes[execution_id] = shape
        self.queue.add(execution_id, shape, self.seq, 0, float(now))

    def views(self):
        out = []
        for i, total in enumerate(self.cpus):
            name = f"w{i}"
            mine = [cpu for workers, cpu, _ in self.running.values() if name in workers]
            labels = {"rack": self.racks[i]} if self.racks else {}
            out.append(
                worker(
                    name, cpu=total, reserved={"cpu": sum(mine)}, active=len(mine),
                    cpu_available=total - sum(mine), labels=labels,
                )
            )  # fmt: skip
        return out

    def tick(self, now: int, durations: list[int]) -> None:
        for execution_id, (_, _, ends) in list(self.running.items()):
            if ends <= now:
                del self.running[execution_id]
        for n, p in enumerate(schedule(self.queue, self.views(), aging=self.aging, now=float(now))):
            self.queue.remove(p.execution_id)
            workers = tuple(w for w, _ in p.members) if p.members else (p.worker,)
            size = self.shapes[p.execution_id].gang.size if p.members else 1  # type: ignore[union-attr]
            assert len(set(workers)) == size  # a gang whole, each member on its own worker
            ends = now + durations[n % len(durations)]
            self.running[p.execution_id] = (workers, self.shapes[p.execution_id].requests.cpu, ends)
            self.placed_at[p.execution_id] = now
        self.check()

    def check(self) -> None:
        for i, total in enumerate(self.cpus):
            mine = [cpu for workers, cpu, _ in self.running.values() if f"w{i}" in workers]
            assert sum(mine) <= total, "overcommitted"
        if self.aging is None:
            return
        for nomination in self.aging.by_execution.values():
            shape = self.shapes[nomination.execution_id]
            if shape.gang is not None:  # every member nominated at once, or none
                assert len(set(nomination.workers)) == shape.gang.size
            for name in nomination.workers:  # one nominee per worker
                assert self.aging.by_worker[name] is nomination


def stream(aging: Aging | None, ticks: int = 200) -> Cluster:
    """Two 4-core workers busy with cpu=1 work; a gang of 2 x 4 cores behind it; more cpu=1 work a
    tick than the workers finish, so a core that frees is always taken at once."""
    cluster = Cluster([4, 4], aging)
    for k in range(8):
        cluster.submit(f"p{k}", one(1), 0)
    cluster.submit("gang", gang(2, 4), 0)
    for now in range(ticks):
        for k in range(4):
            cluster.submit(f"s{now}-{k}", one(1), now)
        cluster.tick(now, [2, 3])  # staggered runs: some core is always busy
    return cluster


def test_without_aging_a_steady_small_stream_starves_a_gang():
    assert "gang" not in stream(None).placed_at


def test_with_aging_a_gang_is_placed_once_the_work_before_its_nomination_ends():
    placed = stream(Aging(10)).placed_at["gang"]
    assert 10 <= placed <= 10 + 3  # nominated at 10, the longest run then ends within 3 ticks


def test_a_starving_gang_is_nominated_a_worker_per_member_in_one_rack_and_only_backfill_goes_there():
    aging = Aging(5)
    fleet = [
        worker("a", cpu=4, reserved={"cpu": 3}, active=1, labels={"rack": "r1"}),
        worker("b", cpu=4, reserved={"cpu": 2}, active=1, labels={"rack": "r1"}),
        worker("c", cpu=4, reserved={"cpu": 1}, active=1, labels={"rack": "r2"}),
        worker("d", cpu=4, reserved={"cpu": 1}, active=1, labels={"rack": "r2"}),
        worker("e", cpu=4, reserved={"cpu": 3}, active=1, labels={"rack": "r3"}),
    ]
    queue = PendingQueue()
    queue.add("g", gang(2, 4, same="rack"), 1, 0, 0.0)
    queue.add("small", one(1), 2, 0, 9.0)
    placed = schedule(queue, fleet, aging=aging, now=10.0)
    nomination = aging.by_execution["g"]
    assert set(nomination.workers) == {"c", "d"}  # rack r2 has the least to free in all
    assert aging.by_worker["c"] is nomination and aging.by_worker["d"] is nomination
    # The small run needs a core: beside a member that needs all four, it goes elsewhere.
    assert [(p.execution_id, p.worker) for p in placed] == [("small", "b")]
    on_rack = [v for v in fleet if v.name in ("c", "d")]
    small = explain(one(1), on_rack, execution_id="small", aging=aging, now=10.0)
    assert small.summary == "0/2 workers can run it: 2 are reserved for g, waiting 10s"
    own = explain(gang(2, 4, same="rack"), fleet, execution_id="g", aging=aging, now=10.0)
    assert own.summary.endswith(
        "waiting 10s, nominated workers c, d: only work that fits beside its members goes there"
    ), own.summary
    assert own.nominated == "c"


def test_a_starving_gang_is_placed_whole_on_its_nominated_workers_when_they_free():
    aging = Aging(5)
    busy = [worker(n, cpu=4, reserved={"cpu": 1}, active=1) for n in ("a", "b", "c")]
    queue = PendingQueue()
    queue.add("g", gang(2, 4), 1, 0, 0.0)
    assert schedule(queue, busy, aging=aging, now=10.0) == []
    nominated = set(aging.by_execution["g"].workers)
    freed = [worker(v.name, cpu=4) if v.name in nominated else v for v in busy]
    (placement,) = schedule(queue, freed, aging=aging, now=11.0)
    assert {w for w, _ in placement.members} == nominated
    assert "g" not in aging.by_execution and not aging.by_worker


def test_a_younger_gang_gets_no_partial_nomination():
    aging = Aging(5)
    fleet = [worker(n, cpu=4, reserved={"cpu": 1}, active=1) for n in ("a", "b", "c")]
    queue = PendingQueue()
    queue.add("old", gang(2, 4), 1, 0, 0.0)
    queue.add("young", gang(2, 4), 2, 0, 1.0)
    schedule(queue, fleet, aging=aging, now=10.0)
    assert len(aging.by_execution["old"].workers) == 2
    assert "young" not in aging.by_execution  # one worker left: no member is nominated alone


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cpus=st.lists(st.integers(2, 6), min_size=2, max_size=5),
    racks=st.lists(st.sampled_from(["r1", "r2"]), min_size=5, max_size=5),
    gangs=st.lists(
        st.tuples(st.integers(2, 3), st.sampled_from([None, "rack"]), st.integers(1, 5)),
        min_size=1,
        max_size=3,
    ),
    small=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    after=st.integers(1, 6),
    durations=st.lists(st.integers(1, 4), min_size=1, max_size=4),
)
def test_every_starving_gang_that_fits_the_idle_fleet_is_placed_and_none_deadlock(
    cpus, racks, gangs, small, after, durations
):
    cluster = Cluster(cpus, Aging(after), racks[: len(cpus)])
    core = min(cpus)
    wanted = []
    for k, (size, same, at) in enumerate(gangs):
        by_rack = [sum(1 for r in cluster.racks if r == value) for value in ("r1", "r2")]  # type: ignore[union-attr]
        if size > (max(by_rack) if same else len(cpus)):
            continue  # infeasible even idle: aging nominates nothing for it
        wanted.append((f"g{k}", gang(size, core, same=same), at))
    for now in range(300):
        # Small work keeps every core wanted throughout (a backlog of a fleet's worth).
        backlog = sum(1 for e in cluster.shapes if e.startswith("s") and e not in cluster.placed_at)
        for k in range(max(small[now % len(small)], sum(cpus) - backlog)):
            cluster.submit(f"s{now}-{k}", one(1), now)
        for execution_id, shape, at in wanted:
            if now == at:  # behind the small work already waiting (from the first tick on: a busy fleet)
                cluster.submit(execution_id, shape, now)
        cluster.tick(now, durations)
        if all(execution_id in cluster.placed_at for execution_id, _, _ in wanted):
            break
    assert all(execution_id in cluster.placed_at for execution_id, _, _ in wanted), cluster.placed_at


def test_a_pass_over_one_of_its_workers_keeps_guarding_it():
    # A pass scoped to the worker that freed room (not the whole fleet) guards the gang's member
    # there: nothing that does not fit beside the member is placed on it.
    aging = Aging(5)
    fleet = [worker(n, cpu=4, reserved={"cpu": 1}, active=1) for n in ("a", "b")]
    queue = PendingQueue()
    queue.add("g", gang(2, 4), 1, 0, 0.0)
    schedule(queue, fleet, aging=aging, now=10.0)
    assert set(aging.by_execution["g"].workers) == {"a", "b"}
    queue.add("small", one(1), 2, 0, 10.0)
    freed = [worker("a", cpu=4)]
    assert schedule(queue, freed, aging=aging, now=11.0, whole_fleet=False) == []
    assert set(aging.by_execution["g"].workers) == {"a", "b"}


def test_a_guard_only_pass_for_gangs_places_a_nominated_gang_whose_workers_have_drained():
    # The dispatcher's pass for pending gangs after a worker frees room guards standing
    # nominations only (starving_first=False); a nominated gang of its shapes whose every worker
    # has room now is placed there, whole. A pass for other shapes places nothing of it.
    aging = Aging(5)
    shape = gang(2, 4)
    busy = [worker(n, cpu=4, reserved={"cpu": 1}, active=1) for n in ("a", "b", "c")]
    queue = PendingQueue()
    queue.add("g", shape, 1, 0, 0.0)
    schedule(queue, busy, aging=aging, now=10.0)
    nominated = set(aging.by_execution["g"].workers)
    freed = [worker(v.name, cpu=4) if v.name in nominated else v for v in busy]
    assert schedule(queue, freed, aging=aging, now=11.0, shapes=[one(1)], starving_first=False) == []
    (placement,) = schedule(queue, freed, aging=aging, now=11.0, shapes=[shape], starving_first=False)
    assert {w for w, _ in placement.members} == nominated and "g" not in aging.by_execution
