"""Properties of one scheduling pass over random fleets and random mixed-shape queues.

The fleet is drawn as plain specs and the DESIGN §3 rules are re-implemented
here (``free_*``, ``fits_idle``, ``fits_now_oracle``, ``expected_rejections``),
so the matcher is checked against an independent reading of the spec, not
against itself. Shapes are anchored on the drawn workers' free and total
amounts, so exact fits and one-short boundaries come up in most examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from flux.matching import (
    Amounts,
    FeasibilityCache,
    Reason,
    Room,
    explain,
    fits_now,
    permanent_rejection,
    rejections,
    schedule,
)
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
    gpu_memory: int = 0

    def shape(self):
        return shape(
            self.cpu, self.memory, self.gpu, self.disk, list(self.packages), self.affinity,
            gpu_memory=self.gpu_memory or None,
        )  # fmt: skip


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


# Every drawn GPU is an 80 GiB device (the fleet builder's default size).
GPU_SIZE = 80 * GiB


def gpus_with(w: WorkerSpec, vram: int) -> set[int]:
    """Unheld GPUs with at least ``vram`` free (and any free at all)."""
    return {i for i in free_gpus(w) if w.gpu_free_vram[i] >= vram}


def gpu_memory_fits_idle(s: ShapeSpec, w: WorkerSpec) -> bool:
    return not s.gpu_memory or (s.gpu_memory <= GPU_SIZE and s.gpu <= len(w.gpu_free_vram))


def labels_fit(s: ShapeSpec, w: WorkerSpec) -> bool:
    return all(w.labels.get(k) == v for k, v in s.affinity.items())


def packages_fit(s: ShapeSpec, w: WorkerSpec) -> bool:
    for text in s.packages:
        name, predicate = REQUIREMENTS[text]
        version = w.packages.get(name)
        if version is None or not predicate(VERSIONS[version]):
            return False
    return True


def static_fit(s: ShapeSpec, w: WorkerSpec) -> bool:
    return labels_fit(s, w) and packages_fit(s, w)


def fits_idle(s: ShapeSpec, w: WorkerSpec) -> bool:
    return (
        static_fit(s, w)
        and w.capacity >= 1
        and s.cpu <= w.cpu_total
        and s.memory <= w.memory_total
        and s.disk <= w.disk_total
        # Idle: no execution holds a GPU. VRAM used outside Flux may free up, so every GPU counts.
        and s.gpu <= len(w.gpu_free_vram)
        and gpu_memory_fits_idle(s, w)
    )


def expected_rejections(s: ShapeSpec, w: WorkerSpec) -> dict[Reason, bool]:
    """Each field that fails now, mapped to whether it would fail on the idle worker too."""
    out = {}
    if not labels_fit(s, w):
        out[Reason.LABEL] = True
    if w.active >= w.capacity:
        out[Reason.CAPACITY] = w.capacity <= 0
    if s.cpu > free_cpu(w):
        out[Reason.CPU] = s.cpu > w.cpu_total
    if s.memory > free_memory(w):
        out[Reason.MEMORY] = s.memory > w.memory_total
    if s.gpu > len(free_gpus(w)):
        out[Reason.GPU] = s.gpu > len(w.gpu_free_vram)
    if s.gpu_memory and s.gpu <= len(w.gpu_free_vram) and not gpu_memory_fits_idle(s, w):
        out[Reason.GPU_MEMORY] = True  # devices too small: said even while they are busy
    elif s.gpu_memory and s.gpu <= len(free_gpus(w)) and s.gpu > len(gpus_with(w, s.gpu_memory)):
        out[Reason.GPU_MEMORY] = False
    if s.disk > free_disk(w):
        out[Reason.DISK] = s.disk > w.disk_total
    if not packages_fit(s, w):
        out[Reason.PACKAGE] = True
    return out


def fits_now_oracle(s: ShapeSpec, w: WorkerSpec) -> bool:
    return (
        static_fit(s, w)
        and w.active < w.capacity
        and s.cpu <= free_cpu(w)
        and s.memory <= free_memory(w)
        and s.disk <= free_disk(w)
        and s.gpu <= len(free_gpus(w))
        and s.gpu <= len(gpus_with(w, s.gpu_memory))
    )


def load_key(room: Room) -> tuple[float, float, str]:
    load = room.active / room.capacity if room.capacity > 0 else float("inf")
    fraction = room.cpu / room.cpu_total if room.cpu_total > 0 else 0.0
    return (load, -fraction, room.view.name)


# ---- strategies ----------------------------------------------------------------------------------

DISK = 10 * GiB
NAMES = [f"w{i}" for i in range(8)]


# Every strategy is built once at import: drawing from fresh strategy objects dominates run time.
# One resource as (total, reserved, unreported, external) in whole units. The report reflects
# the reservations made before it (reserved - unreported) and load from outside Flux
# (external; negative when the machine has more than the cap advertises).
_RESOURCE = st.tuples(
    st.sampled_from([8, 4, 8, 2, 0]),
    st.sampled_from([0, 0, 1, 2, 8]),
    st.sampled_from([0, 1, 2, 8]),
    st.sampled_from([0, 0, 1, 3, -4]),
)
# Subtracting a byte from memory and disk makes "one byte short" common next to exact fits.
_SHORT = st.tuples(st.sampled_from([0, 0, 0, 1]), st.sampled_from([0, 0, 0, 1]))
_RAW_WORKER = st.tuples(
    st.tuples(_RESOURCE, _RESOURCE, _RESOURCE),
    st.tuples(_SHORT, _SHORT),
    st.lists(st.sampled_from([0, 1, GiB, 40 * GiB, 40 * GiB]), max_size=4),
    st.lists(st.sampled_from([False, False, True]), min_size=4, max_size=4),
    st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in LABELS.items()}),
    st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in INSTALLABLE.items()}),
    st.sampled_from([16, 16, 16, 16, 2, 1, 0]),  # capacity
    st.sampled_from([0, 0, 0, 0, 1, 2, 16]),  # active
)


def _resource(raw: tuple[int, int, int, int], unit: int, short: tuple[int, int] = (0, 0)):
    total, reserved, unreported, external = raw
    reserved = min(reserved, total)  # reservations never exceed the total...
    unreported = min(unreported, reserved)  # ...and what is unreported is part of them
    observed = max(0, (total - reserved + unreported - external) * unit - short[1])
    return max(0, total * unit - short[0]), observed, reserved * unit, unreported * unit


def worker_spec(name: str, raw: tuple) -> WorkerSpec:
    (cpu, memory, disk), (memory_short, disk_short), vram, held, labels, packages, capacity, active = raw
    cpu = _resource(cpu, 1)
    memory = _resource(memory, 2 * GiB, memory_short)
    disk = _resource(disk, DISK, disk_short)
    return WorkerSpec(
        name=name,
        cpu_total=cpu[0],
        cpu_available=cpu[1],
        memory_total=memory[0],
        memory_available=memory[1],
        disk_total=disk[0],
        disk_free=disk[1],
        gpu_free_vram=tuple(vram),
        held=frozenset(i for i in range(len(vram)) if held[i]),
        labels=labels,
        packages=packages,
        capacity=capacity,
        active=active,
        reserved=(cpu[2], memory[2], disk[2]),
        unreported=(cpu[3], memory[3], disk[3]),
    )


# A shape constrains a few fields (often none), so that placements happen. A field's
# value is either a fixed one (some past every worker's total) or anchored on one
# worker's free or total amount, give or take one unit, so exact fits and
# "one short" boundaries come up in most examples.
_FIELDS = {
    "cpu": st.sampled_from([1, 2, 3, 5, 9]),
    "memory": st.sampled_from([1, 2, 4, 8, 17]).map(lambda n: n * GiB),
    "gpu": st.sampled_from([1, 1, 2, 5]),
    "disk": st.sampled_from([1, 3, 5]).map(lambda n: n * DISK),
    "affinity": st.sampled_from([{"role": "training"}, {"zone": "a"}, {"role": "inference", "zone": "b"}]),
    "packages": st.sampled_from([*((r,) for r in REQUIREMENTS), ("numpy>=2", "torch>=2,<3")]),
    # Next to the drawn free VRAM (0, 1, 1 GiB, 40 GiB) and the 80 GiB device size.
    "gpu_memory": st.sampled_from([1, 2, GiB, GiB + 1, 40 * GiB, 40 * GiB + 1, 80 * GiB, 80 * GiB + 1]),
}
# (free, total) of the anchor worker; memory and disk then move by one byte.
_ANCHORED = {
    "cpu": (free_cpu, lambda w: w.cpu_total),
    "memory": (free_memory, lambda w: w.memory_total),
    "gpu": (lambda w: len(free_gpus(w)), lambda w: len(w.gpu_free_vram)),
    "disk": (free_disk, lambda w: w.disk_total),
}
_DEFAULTS = {"cpu": 0, "memory": 0, "gpu": 0, "disk": 0, "affinity": {}, "packages": (), "gpu_memory": 0}
_FIELD_LISTS = st.lists(st.sampled_from(sorted(_FIELDS)), max_size=3, unique=True)
_HOW = st.sampled_from(["fixed", "free", "free", "total"])
_DELTA = st.sampled_from([-1, 0, 1])


def shape_spec(draw, workers: list[WorkerSpec]) -> ShapeSpec:
    values = {}
    for name in draw(_FIELD_LISTS):
        how = draw(_HOW)
        if how == "fixed" or not workers or name in ("packages", "gpu_memory"):
            values[name] = draw(_FIELDS[name])
            continue
        anchor = workers[draw(st.integers(0, len(workers) - 1))]
        if name == "affinity":
            values[name] = dict(anchor.labels)
            continue
        free, total = _ANCHORED[name]
        values[name] = max(0, (free if how == "free" else total)(anchor) + draw(_DELTA))
    if values.get("gpu_memory") and not values.get("gpu"):
        values["gpu"] = draw(st.sampled_from([1, 1, 2]))  # gpu_memory is per device: it needs a count
    return ShapeSpec(**{**_DEFAULTS, **values})


@st.composite
def scenarios(draw) -> Scenario:
    names = draw(st.permutations(NAMES))
    raw = draw(st.lists(_RAW_WORKER, min_size=1, max_size=5)) if draw(st.integers(0, 9)) else []
    workers = [worker_spec(n, r) for n, r in zip(names, raw, strict=False)]
    shapes = {}
    for _ in range(draw(st.integers(1, 3))):
        spec = shape_spec(draw, workers)
        shapes.setdefault(repr(spec), spec)
    shapes = list(shapes.values())
    kinds = [k % len(shapes) for k in draw(st.lists(st.integers(0, 2), max_size=16))]
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
        # GPUs go out most free VRAM first, from those no execution holds; with gpu_memory,
        # the best fit among those with enough.
        by_vram = sorted(free_gpus(w), key=lambda i: (-w.gpu_free_vram[i], i))
        for p in mine:
            ask = specs[p.shape]
            assert static_fit(ask, w)
            if ask.gpu_memory:
                eligible = [i for i in by_vram if w.gpu_free_vram[i] >= ask.gpu_memory]
                assert p.gpu_indices == tuple(eligible[len(eligible) - ask.gpu :])
            else:
                assert p.gpu_indices == tuple(by_vram[: len(p.gpu_indices)])
            by_vram = [i for i in by_vram if i not in p.gpu_indices]
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
        assert room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory) == p.gpu_indices
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
            reasons = {r.reason: r.permanent for r in verdict.rejections}
            assert reasons == expected_rejections(spec, w)
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
        rooms[p.worker].take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
        check()


_AMOUNT = st.integers(0, 2**40)


@SETTINGS
@given(
    st.tuples(_AMOUNT, _AMOUNT, _AMOUNT, _AMOUNT),
    st.tuples(_AMOUNT, _AMOUNT, _AMOUNT, _AMOUNT),
    st.tuples(_AMOUNT, _AMOUNT, _AMOUNT, _AMOUNT),
)
def test_free_is_min_of_observed_minus_unreported_and_total_minus_reserved(cpu, memory, disk):
    # (total, observed, reserved, unreported) with unreported <= reserved <= total, per resource.
    def ordered(t):
        total, observed, reserved, unreported = t
        reserved = min(reserved, total)
        return total, observed, reserved, min(unreported, reserved)

    cpu, memory, disk = ordered(cpu), ordered(memory), ordered(disk)
    view = worker(
        cpu=cpu[0],
        cpu_available=cpu[1],
        memory=memory[0],
        memory_available=memory[1],
        disk=disk[0],
        disk_free=disk[1],
        reserved=Amounts(cpu[2], memory[2], disk[2]),
        unreported=Amounts(cpu[3], memory[3], disk[3]),
    )
    room = Room(view)
    for got, (total, observed, reserved, unreported) in zip(
        (room.cpu, room.memory, room.disk), (cpu, memory, disk), strict=True
    ):
        assert got == max(0, min(observed - unreported, total - reserved))


@SETTINGS
@given(scenarios())
def test_never_over_any_devices_free_vram(scn):
    """Every GPU assigned with ``gpu_memory`` had that much free, was unheld, and went out once."""
    placements = _placements(scn)
    specs = {s.shape(): s for s in scn.shapes}
    for w in scn.workers:
        assigned = [i for p in placements if p.worker == w.name for i in p.gpu_indices]
        assert len(assigned) == len(set(assigned)) and not set(assigned) & w.held
        for p in placements:
            if p.worker == w.name:
                for i in p.gpu_indices:
                    assert w.gpu_free_vram[i] >= max(1, specs[p.shape].gpu_memory)
