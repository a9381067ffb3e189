"""Properties of one scheduling pass over random fleets and random mixed-shape queues.

The fleet is drawn as plain specs and the DESIGN §3 rules are re-implemented
here (``free_*``, ``fits_idle``, ``fits_now_oracle``), so the matcher is
checked against an independent reading of the spec, not against itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from flux.matching import Amounts, FeasibilityCache, Room, explain, fits_now, permanent_rejection, rejections, schedule
from tests.unit.fleet import GiB, queue_of, shape, worker

SETTINGS = settings(max_examples=200, deadline=None)

LABELS = {"role": ["training", "training", "inference"], "zone": ["a", "a", "b"]}
VERSIONS = {"1.26": (1, 26), "2.0": (2, 0), "2.5": (2, 5), "1.13.1": (1, 13, 1), "2.1.0+cu121": (2, 1, 0)}
INSTALLABLE = {"numpy": ["1.26", "2.0", "2.5"], "torch": ["1.13.1", "2.1.0+cu121"]}
# Requirement text -> (package, predicate on the installed version's release tuple).
REQUIREMENTS = {
    "numpy": ("numpy", lambda v: True),
    "numpy>=2": ("numpy", lambda v: v >= (2,)),
    "NumPy<2": ("numpy", lambda v: v < (2,)),
    "torch>=2,<3": ("torch", lambda v: (2,) <= v < (3,)),
    "torch==2.1.0": ("torch", lambda v: v == (2, 1, 0)),
}


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    cpu_total: int
    cpu_available: int
    memory_total: int
    memory_available: int
    disk_total: int
    disk_free: int
    gpu_free_vram: tuple[int, ...]
    held: frozenset[int]
    labels: dict[str, str]
    packages: dict[str, str]
    capacity: int
    active: int
    reserved: tuple[int, int, int]
    unreported: tuple[int, int, int]

    def view(self):
        return worker(
            self.name,
            cpu=self.cpu_total,
            memory=self.memory_total,
            gpus=list(self.gpu_free_vram),
            disk=self.disk_total,
            labels=self.labels,
            packages=self.packages,
            active=self.active,
            capacity=self.capacity,
            reserved=Amounts(*self.reserved),
            unreported=Amounts(*self.unreported),
            held_gpus=self.held,
            cpu_available=self.cpu_available,
            memory_available=self.memory_available,
            disk_free=self.disk_free,
        )


@dataclass(frozen=True)
class ShapeSpec:
    cpu: int
    memory: int
    gpu: int
    disk: int
    affinity: dict[str, str]
    packages: tuple[str, ...]

    def shape(self):
        return shape(self.cpu, self.memory, self.gpu, self.disk, list(self.packages), self.affinity)


@dataclass
class Scenario:
    workers: list[WorkerSpec]
    shapes: list[ShapeSpec]
    # (execution id, shape index, seq) in the order they were added to the queue.
    pending: list[tuple[str, int, int]]
    views: list = field(init=False)
    shape_objects: list = field(init=False)

    def __post_init__(self):
        self.views = [w.view() for w in self.workers]
        self.shape_objects = [s.shape() for s in self.shapes]

    def queue(self):
        return queue_of(*[(eid, self.shape_objects[i], seq) for eid, i, seq in self.pending])

    def spec_of(self, name):
        return next(w for w in self.workers if w.name == name)

    def view_of(self, name):
        return next(v for v in self.views if v.name == name)


# ---- the oracle: DESIGN §3 written out again ----------------------------------------------------


def free_cpu(w: WorkerSpec) -> int:
    return max(0, min(w.cpu_available - w.unreported[0], w.cpu_total - w.reserved[0]))


def free_memory(w: WorkerSpec) -> int:
    return max(0, min(w.memory_available - w.unreported[1], w.memory_total - w.reserved[1]))


def free_disk(w: WorkerSpec) -> int:
    return max(0, min(w.disk_free - w.unreported[2], w.disk_total - w.reserved[2]))


def free_gpus(w: WorkerSpec) -> set[int]:
    return {i for i, vram in enumerate(w.gpu_free_vram) if vram > 0 and i not in w.held}


def static_fit(s: ShapeSpec, w: WorkerSpec) -> bool:
    labels = all(w.labels.get(k) == v for k, v in s.affinity.items())
    packages = True
    for text in s.packages:
        name, predicate = REQUIREMENTS[text]
        version = w.packages.get(name)
        packages = packages and version is not None and predicate(VERSIONS[version])
    return labels and packages


def fits_idle(s: ShapeSpec, w: WorkerSpec) -> bool:
    return (
        static_fit(s, w)
        and w.capacity >= 1
        and s.cpu <= w.cpu_total
        and s.memory <= w.memory_total
        and s.disk <= w.disk_total
        # Idle: no execution holds a GPU. VRAM used outside Flux may free up, so every GPU counts.
        and s.gpu <= len(w.gpu_free_vram)
    )


def fits_now_oracle(s: ShapeSpec, w: WorkerSpec) -> bool:
    return (
        static_fit(s, w)
        and w.active < w.capacity
        and s.cpu <= free_cpu(w)
        and s.memory <= free_memory(w)
        and s.disk <= free_disk(w)
        and s.gpu <= len(free_gpus(w))
    )


def load_key(room: Room) -> tuple[float, float, str]:
    load = room.active / room.capacity if room.capacity > 0 else float("inf")
    fraction = room.cpu / room.cpu_total if room.cpu_total > 0 else 0.0
    return (load, -fraction, room.view.name)


# ---- strategies ----------------------------------------------------------------------------------

DISK = 10 * GiB
NAMES = [f"w{i}" for i in range(8)]


def _bytes(unit: int, most: int):
    # Whole units make exact fits common; "- 1" makes one-byte-short common too.
    return st.builds(lambda n, short: max(0, n * unit - short), st.integers(0, most), st.sampled_from([0, 0, 1]))


_UNITS = st.tuples(*[st.sampled_from([0, 0, 0, 1, 2, 8])] * 3)
# None: observed free equals the allocatable total (an idle machine).
_OBSERVED = st.none() | st.integers(0, 10)
# Every strategy is built once here: drawing from fresh strategy objects dominates the run time.
_RAW_WORKER = st.tuples(
    st.integers(0, 8),
    _OBSERVED,
    _bytes(GiB, 8),
    st.none() | _bytes(GiB, 10),
    _bytes(DISK, 4),
    st.none() | _bytes(DISK, 5),
    st.lists(st.sampled_from([0, 1, GiB, 8 * GiB, 40 * GiB]), max_size=3),
    st.lists(st.booleans(), min_size=3, max_size=3),
    st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in LABELS.items()}),
    st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in INSTALLABLE.items()}),
    st.sampled_from([0, 1, 2, 4, 16, 16]),  # capacity
    st.sampled_from([0, 0, 0, 1, 2, 4]),  # active
    _UNITS,
    _UNITS,
)


def worker_spec(name: str, raw: tuple) -> WorkerSpec:
    cpu, cpu_available, memory, memory_available, disk, disk_free, vram, held, labels, packages = raw[:10]
    capacity, active, reserved_units, unreported_units = raw[10:]
    units = (1, GiB, DISK)
    # Reservations never exceed the total, and what is unreported is part of what is reserved.
    most = (cpu, memory // GiB, disk // DISK)
    reserved = tuple(min(n, m) for n, m in zip(reserved_units, most, strict=True))
    unreported = tuple(min(n, r) for n, r in zip(unreported_units, reserved, strict=True))
    return WorkerSpec(
        name=name,
        cpu_total=cpu,
        cpu_available=cpu if cpu_available is None else cpu_available,
        memory_total=memory,
        memory_available=memory if memory_available is None else memory_available,
        disk_total=disk,
        disk_free=disk if disk_free is None else disk_free,
        gpu_free_vram=tuple(vram),
        held=frozenset(i for i in range(len(vram)) if held[i]),
        labels=labels,
        packages=packages,
        capacity=capacity,
        active=active,
        reserved=tuple(n * u for n, u in zip(reserved, units, strict=True)),
        unreported=tuple(n * u for n, u in zip(unreported, units, strict=True)),
    )


# Zeros are common so that placements happen; each field still reaches past every worker total.
shape_specs = st.builds(
    ShapeSpec,
    cpu=st.sampled_from([0, 0, 1, 2, 3, 5, 9]),
    memory=st.sampled_from([0, 0, 1, 4, 6, 9]).map(lambda n: n * GiB),
    gpu=st.sampled_from([0, 0, 0, 1, 2, 4]),
    disk=st.sampled_from([0, 0, 1, 3, 5]).map(lambda n: n * DISK),
    affinity=st.sampled_from([{}, {}, {}, {"role": "training"}, {"zone": "a"}, {"role": "inference", "zone": "b"}]),
    packages=st.sampled_from([(), (), (), *((r,) for r in REQUIREMENTS), ("numpy>=2", "torch>=2,<3")]),
)


@st.composite
def scenarios(draw) -> Scenario:
    names = draw(st.permutations(NAMES))
    raw = draw(st.lists(_RAW_WORKER, min_size=1, max_size=6) | st.just([]))
    workers = [worker_spec(n, r) for n, r in zip(names, raw)]
    shapes = draw(st.lists(shape_specs, min_size=1, max_size=4, unique_by=repr))
    kinds = [k % len(shapes) for k in draw(st.lists(st.integers(0, 3), max_size=14))]
    seqs = draw(st.permutations(range(len(kinds))))
    pending = [(f"e{seq}", kind, seq) for kind, seq in zip(kinds, seqs, strict=True)]
    return Scenario(workers, shapes, pending)


def _placements(scn: Scenario, views=None, **kwargs):
    return schedule(scn.queue(), scn.views if views is None else views, **kwargs)


def _as_tuples(placements):
    return [(p.execution_id, p.worker, p.gpu_indices) for p in placements]


# ---- properties ----------------------------------------------------------------------------------


@SETTINGS
@given(scenarios())
def test_never_over_capacity_or_any_resource(scn):
    placements = _placements(scn)
    specs = {s.shape(): s for s in scn.shapes}
    for w in scn.workers:
        mine = [p for p in placements if p.worker == w.name]
        asks = [specs[p.shape] for p in mine]
        assert sum(s.cpu for s in asks) <= free_cpu(w)
        assert sum(s.memory for s in asks) <= free_memory(w)
        assert sum(s.disk for s in asks) <= free_disk(w)
        assert w.active + len(mine) <= w.capacity or not mine
        gpus = [i for p in mine for i in p.gpu_indices]
        assert len(gpus) == len(set(gpus)) == sum(s.gpu for s in asks)
        assert set(gpus) <= free_gpus(w)
        for p in mine:
            assert static_fit(specs[p.shape], w)
    assert len({p.execution_id for p in placements}) == len(placements)


@SETTINGS
@given(scenarios())
def test_every_placement_passes_every_filter_and_goes_to_the_least_loaded(scn):
    placements = _placements(scn)
    rooms = {v.name: Room(v) for v in scn.views}
    seq = {eid: s for eid, _, s in scn.pending}
    placed = {p.execution_id for p in placements}
    kinds = {eid: scn.shape_objects[i] for eid, i, _ in scn.pending}
    for p in placements:
        room = rooms[p.worker]
        assert rejections(p.shape, scn.view_of(p.worker), room) == []
        capable = [r for r in rooms.values() if not rejections(p.shape, r.view, r)]
        assert min(load_key(r) for r in capable) == load_key(room)
        # FIFO across shapes: anything older still unplaced could not fit anywhere right now.
        for eid, s in seq.items():
            if s < seq[p.execution_id] and eid not in placed:
                assert all(rejections(kinds[eid], r.view, r) for r in rooms.values())
        r = p.shape.requests
        assert room.take(r.cpu, r.memory, r.disk, r.gpu) == p.gpu_indices
    # Nothing left behind that would still fit: the pass stops only when space runs out.
    for eid in seq.keys() - placed:
        assert all(rejections(kinds[eid], r.view, r) for r in rooms.values())
    # Oldest first overall.
    assert [seq[p.execution_id] for p in placements] == sorted(seq[p.execution_id] for p in placements)


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_worker_order_does_not_change_the_result(scn, rnd):
    expected = _as_tuples(_placements(scn))
    shuffled = list(scn.views)
    rnd.shuffle(shuffled)
    assert _as_tuples(_placements(scn, shuffled)) == expected
    cache = FeasibilityCache()
    assert _as_tuples(_placements(scn, shuffled, cache=cache)) == expected
    assert _as_tuples(_placements(scn, list(reversed(shuffled)), cache=cache)) == expected


@SETTINGS
@given(scenarios())
def test_infeasible_exactly_when_no_worker_could_fit_it_idle(scn):
    for spec, shp in zip(scn.shapes, scn.shape_objects, strict=True):
        got = explain(shp, scn.views)
        assert got.infeasible == (not any(fits_idle(spec, w) for w in scn.workers))
        assert got.capable == sum(fits_now_oracle(spec, w) for w in scn.workers)
        for verdict in got.verdicts:
            w = scn.spec_of(verdict.worker)
            assert verdict.permanent == (not fits_idle(spec, w))
            assert verdict.fits == fits_now_oracle(spec, w)
            assert (permanent_rejection(shp, scn.view_of(w.name)) is None) == fits_idle(spec, w)
        assert got.summary.startswith(f"{got.capable}/{len(scn.workers)} workers can run it")


@SETTINGS
@given(scenarios())
def test_fifo_within_a_shape_places_a_prefix(scn):
    placements = _placements(scn)
    placed = [p.execution_id for p in placements]
    for index, shp in enumerate(scn.shape_objects):
        order = [eid for eid, _, _ in sorted((e for e in scn.pending if e[1] == index), key=lambda e: e[2])]
        mine = [eid for eid in placed if eid in order]
        assert mine == order[: len(mine)]
        assert all(p.shape == shp for p in placements if p.execution_id in order)


@SETTINGS
@given(scenarios(), st.integers(0, 6))
def test_limit_returns_a_prefix_of_the_full_pass(scn, limit):
    full = _as_tuples(_placements(scn))
    assert _as_tuples(_placements(scn, limit=limit)) == full[:limit]


@SETTINGS
@given(scenarios())
def test_fits_now_agrees_with_rejections_on_statically_capable_workers(scn):
    rooms = {v.name: Room(v) for v in scn.views}

    def check():
        for shp in scn.shape_objects:
            for room in rooms.values():
                if permanent_rejection(shp, room.view) is None:
                    assert fits_now(shp, room) == (not rejections(shp, room.view, room))

    check()
    for p in _placements(scn):
        r = p.shape.requests
        rooms[p.worker].take(r.cpu, r.memory, r.disk, r.gpu)
        check()
