"""Each feasibility filter at every boundary of its field (DESIGN §3).

A row names one filter, one shape and one worker, and the exact rejection
expected: reason code, permanent (could not fit even idle) or busy, and the
wanted/offered/detail texts a user reads in ``flux execution explain``.
"""

from __future__ import annotations

import pytest

from flux.matching import Reason, Room, fits_now, permanent_rejection, rejections
from flux.matching import filters as f
from tests.unit.fleet import GiB, shape, worker

R = Reason

# (filter, shape, worker, expected) where expected is None (passes) or
# (reason, permanent, wanted, offered, detail).
CASES = [
    # --- runtime ----------------------------------------------------------------------------
    pytest.param(
        f.runtime, shape(), worker(runtimes=["python 3.11.9"]), None, id="runtime: python on a python worker"
    ),
    pytest.param(
        f.runtime,
        shape(),
        worker(),
        None,
        id="runtime: a worker that advertises none is an older Python worker",
    ),
    pytest.param(
        f.runtime,
        shape(runtime="node"),
        worker(runtimes=["python 3.12.1", "node 20.11.1"]),
        None,
        id="runtime: matched by name, whatever the version",
    ),
    pytest.param(
        f.runtime,
        shape(),
        worker(runtimes=["node 20.11.1"]),
        (R.RUNTIME, True, "python", "node 20.11.1", "lacks runtime python (runs node 20.11.1)"),
        id="runtime: python workflow on a node worker",
    ),
    pytest.param(
        f.runtime,
        shape(runtime="node"),
        worker(),
        (R.RUNTIME, True, "node", "none", "lacks runtime node (runs none)"),
        id="runtime: node workflow on a worker advertising nothing",
    ),
    # --- paused -----------------------------------------------------------------------------
    pytest.param(f.paused, shape(), worker(paused=False), None, id="paused: an active worker passes"),
    pytest.param(
        f.paused,
        shape(),
        worker(paused=True),
        (R.PAUSED, False, "an active worker", "paused", "is paused"),
        id="paused: busy, never permanent",
    ),
    # --- labels -----------------------------------------------------------------------------
    pytest.param(
        f.labels, shape(), worker(labels={"role": "training"}), None, id="labels: no affinity runs anywhere"
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training"}),
        worker(labels={"role": "training"}),
        None,
        id="labels: exact match",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training"}),
        worker(labels={"role": "training", "zone": "a"}),
        None,
        id="labels: extra worker labels ignored",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training"}),
        worker(),
        (R.LABEL, True, "role=training", "role=", "lacks label role=training"),
        id="labels: label missing",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training"}),
        worker(labels={"role": "inference"}),
        (R.LABEL, True, "role=training", "role=inference", "has label role=inference, not role=training"),
        id="labels: label wrong value",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training"}),
        worker(labels={"role": "Training"}),
        (R.LABEL, True, "role=training", "role=Training", "has label role=Training, not role=training"),
        id="labels: values are case-sensitive",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training", "zone": "a"}),
        worker(labels={"role": "training"}),
        (R.LABEL, True, "zone=a", "zone=", "lacks label zone=a"),
        id="labels: every key must hold",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": "training", "zone": "a", "gpu": "a100"}),
        worker(labels={"zone": "b"}),
        (
            R.LABEL,
            True,
            "gpu=a100, role=training, zone=a",
            "gpu=, role=, zone=b",
            "lacks label gpu=a100 and role=training, and has label zone=b, not zone=a",
        ),
        id="labels: every mismatch named",
    ),  # fmt: skip
    pytest.param(
        f.labels,
        shape(affinity={"role": ""}),
        worker(labels={"role": ""}),
        None,
        id="labels: empty value matches empty value",
    ),
    pytest.param(
        f.labels,
        shape(affinity={"role": ""}),
        worker(),
        (R.LABEL, True, "role=", "role=", "lacks label role="),
        id="labels: empty value still requires the key",
    ),
    # --- capacity ---------------------------------------------------------------------------
    pytest.param(f.capacity, shape(), worker(active=15, capacity=16), None, id="capacity: one slot left"),
    pytest.param(
        f.capacity,
        shape(),
        worker(active=16, capacity=16),
        (R.CAPACITY, False, "1 of 16 slots", "16/16 executions", "is at capacity (16/16 executions)"),
        id="capacity: at capacity",
    ),
    pytest.param(
        f.capacity,
        shape(),
        worker(active=17, capacity=16),
        (R.CAPACITY, False, "1 of 16 slots", "17/16 executions", "is at capacity (17/16 executions)"),
        id="capacity: over capacity after a cap was lowered",
    ),
    pytest.param(
        f.capacity,
        shape(),
        worker(capacity=0),
        (R.CAPACITY, True, "1 of 0 slots", "0/0 executions", "is at capacity (0/0 executions)"),
        id="capacity: zero capacity is permanent",
    ),
    # --- cpu ----------------------------------------------------------------------------------
    pytest.param(f.cpu, shape(), worker(cpu_available=0), None, id="cpu: not requested is not checked"),
    pytest.param(f.cpu, shape(cpu=0), worker(cpu=0), None, id="cpu: zero means not checked"),
    pytest.param(f.cpu, shape(cpu=4), worker(cpu=4), None, id="cpu: exact fit"),
    pytest.param(
        f.cpu,
        shape(cpu=4),
        worker(cpu=4, cpu_available=3),
        (R.CPU, False, "4 cores", "3 free", "has 3 of 4 cores free"),
        id="cpu: one core short (busy)",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=5),
        worker(cpu=4),
        (R.CPU, True, "5 cores", "4 total", "has only 4 cores"),
        id="cpu: one core short of total (permanent)",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=2),
        worker(cpu=1),
        (R.CPU, True, "2 cores", "1 total", "has only 1 core"),
        id="cpu: singular core",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=1),
        worker(cpu=0),
        (R.CPU, True, "1 core", "0 total", "has only 0 cores"),
        id="cpu: worker without cores",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=3),
        worker(cpu=8, cpu_available=2),
        (R.CPU, False, "3 cores", "2 free", "has 2 of 8 cores free"),
        id="cpu: observed free lower than allocatable",
    ),
    pytest.param(
        f.cpu, shape(cpu=2), worker(cpu=8, cpu_available=2), None, id="cpu: observed free exact fit"
    ),
    pytest.param(
        f.cpu,
        shape(cpu=3),
        worker(cpu=8, reserved={"cpu": 6}),
        (R.CPU, False, "3 cores", "2 free", "has 2 of 8 cores free"),
        id="cpu: reserved lowers allocatable",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=5),
        worker(cpu=8, cpu_available=6, reserved={"cpu": 2}, unreported={"cpu": 2}),
        (R.CPU, False, "5 cores", "4 free", "has 4 of 8 cores free"),
        id="cpu: reserved since report (unreported) lowers observed",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=4),
        worker(cpu=8, cpu_available=6, reserved={"cpu": 2}, unreported={"cpu": 2}),
        None,
        id="cpu: unreported exact fit",
    ),
    pytest.param(
        f.cpu,
        shape(cpu=5),
        worker(cpu=4, cpu_available=16),
        (R.CPU, True, "5 cores", "4 total", "has only 4 cores"),
        id="cpu: observed above allocatable is capped",
    ),
    # --- memory -------------------------------------------------------------------------------
    pytest.param(f.memory, shape(memory="16Gi"), worker(memory="16Gi"), None, id="memory: exact fit"),
    pytest.param(
        f.memory,
        shape(memory="16Gi"),
        worker(memory="32Gi", memory_available=16 * GiB - 1),
        (
            R.MEMORY,
            False,
            "17179869184 B",
            "17179869183 B free",
            "has 17179869183 B of 32.0 GiB memory free",
        ),
        id="memory: one byte short (busy) is shown exactly",
    ),
    pytest.param(
        f.memory,
        shape(memory="16Gi"),
        worker(memory=16 * GiB - 1),
        (R.MEMORY, True, "17179869184 B", "17179869183 B total", "has only 17179869183 B memory"),
        id="memory: one byte short of total (permanent)",
    ),
    pytest.param(
        f.memory,
        shape(memory="16Gi"),
        worker(memory="8Gi"),
        (R.MEMORY, True, "16.0 GiB", "8.0 GiB total", "has only 8.0 GiB memory"),
        id="memory: total too small",
    ),
    pytest.param(
        f.memory,
        shape(memory="8Gi"),
        worker(memory="16Gi", memory_available="4Gi"),
        (R.MEMORY, False, "8.0 GiB", "4.0 GiB free", "has 4.0 GiB of 16.0 GiB memory free"),
        id="memory: observed free lower than allocatable",
    ),
    pytest.param(
        f.memory,
        shape(memory="8Gi"),
        worker(memory="16Gi", reserved={"memory": "12Gi"}),
        (R.MEMORY, False, "8.0 GiB", "4.0 GiB free", "has 4.0 GiB of 16.0 GiB memory free"),
        id="memory: reserved lowers allocatable",
    ),
    pytest.param(
        f.memory,
        shape(memory="8Gi"),
        worker(
            memory="16Gi", memory_available="12Gi", reserved={"memory": "6Gi"}, unreported={"memory": "6Gi"}
        ),
        (R.MEMORY, False, "8.0 GiB", "6.0 GiB free", "has 6.0 GiB of 16.0 GiB memory free"),
        id="memory: reserved since report (unreported) lowers observed",
    ),
    pytest.param(
        f.memory, shape(memory="17G"), worker(memory="16Gi"), None, id="memory: 17G (decimal) fits 16Gi"
    ),
    pytest.param(
        f.memory,
        shape(memory="18G"),
        worker(memory="16Gi"),
        (R.MEMORY, True, "16.8 GiB", "16.0 GiB total", "has only 16.0 GiB memory"),
        id="memory: 18G (decimal) exceeds 16Gi",
    ),
    # --- gpu ----------------------------------------------------------------------------------
    pytest.param(f.gpu, shape(gpu=0), worker(gpus=0), None, id="gpu: zero means not checked"),
    pytest.param(f.gpu, shape(gpu=2), worker(gpus=2), None, id="gpu: exact fit"),
    pytest.param(
        f.gpu,
        shape(gpu=1),
        worker(gpus=0),
        (R.GPU, True, "1 GPU", "no GPUs", "has no GPUs"),
        id="gpu: worker without GPUs",
    ),
    pytest.param(
        f.gpu,
        shape(gpu=2),
        worker(gpus=1),
        (R.GPU, True, "2 GPUs", "1 total", "has only 1 GPU"),
        id="gpu: one GPU short of total (permanent)",
    ),
    pytest.param(
        f.gpu,
        shape(gpu=2),
        worker(gpus=["80Gi", 0]),
        (R.GPU, False, "2 GPUs", "1 free", "has 1 of 2 GPUs free"),
        id="gpu: GPU with zero free VRAM",
    ),
    pytest.param(f.gpu, shape(gpu=1), worker(gpus=[1, 0]), None, id="gpu: one byte of free VRAM counts"),
    pytest.param(
        f.gpu,
        shape(gpu=2),
        worker(gpus=2, held_gpus={0}),
        (R.GPU, False, "2 GPUs", "1 free", "has 1 of 2 GPUs free"),
        id="gpu: GPU held by running execution",
    ),
    pytest.param(
        f.gpu,
        shape(gpu=1),
        worker(gpus=2, held_gpus={0, 1}),
        (R.GPU, False, "1 GPU", "0 free", "has 0 of 2 GPUs free"),
        id="gpu: every GPU held",
    ),
    # --- gpu_memory: free VRAM per assigned GPU -------------------------------------------------
    pytest.param(
        f.gpu_memory,
        shape(gpu=1, gpu_memory="20Gi"),
        worker(gpus=["20Gi"]),
        None,
        id="gpu_memory: exact fit",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=1, gpu_memory="20Gi"),
        worker(gpus=[20 * GiB - 1]),
        (
            R.GPU_MEMORY,
            False,
            "1 GPU with 20.0 GiB free",
            "0 with 20.0 GiB free",
            "has no GPU with 20.0 GiB free",
        ),
        id="gpu_memory: one byte short",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=2, gpu_memory="20Gi"),
        worker(gpus=["30Gi", "10Gi", "25Gi"]),
        None,
        id="gpu_memory: two of three devices have enough",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=2, gpu_memory="20Gi"),
        worker(gpus=["30Gi", "10Gi", "19Gi"]),
        (
            R.GPU_MEMORY,
            False,
            "2 GPUs with 20.0 GiB free",
            "1 with 20.0 GiB free",
            "has only 1 GPU with 20.0 GiB free",
        ),
        id="gpu_memory: one device short",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=1, gpu_memory="20Gi"),
        worker(gpus=["70Gi", "10Gi"], held_gpus={0}),
        (
            R.GPU_MEMORY,
            False,
            "1 GPU with 20.0 GiB free",
            "0 with 20.0 GiB free",
            "has no GPU with 20.0 GiB free",
        ),
        id="gpu_memory: the roomy GPU is held, whatever its report says",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=1, gpu_memory="81Gi"),
        worker(gpus=2),
        (
            R.GPU_MEMORY,
            True,
            "1 GPU with 81.0 GiB free",
            "0 with 81.0 GiB total",
            "has no GPU with 81.0 GiB total",
        ),
        id="gpu_memory: more than any device has (permanent)",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=2, gpu_memory="40Gi"),
        worker(gpus=["10Gi", "10Gi"], gpu_memory="40Gi"),
        (
            R.GPU_MEMORY,
            False,
            "2 GPUs with 40.0 GiB free",
            "0 with 40.0 GiB free",
            "has no GPU with 40.0 GiB free",
        ),
        id="gpu_memory: devices of exactly the size, in use elsewhere, are only busy",
    ),
    pytest.param(
        f.gpu_memory,
        shape(gpu=2, gpu_memory="20Gi"),
        worker(gpus=2),
        None,
        id="gpu_memory: idle devices",
    ),
    pytest.param(
        f.gpu, shape(gpu=3), worker(gpus=4, held_gpus={2}), None, id="gpu: held GPU leaves exact fit"
    ),
    # --- disk ---------------------------------------------------------------------------------
    pytest.param(f.disk, shape(disk="100Gi"), worker(disk="100Gi"), None, id="disk: exact fit"),
    pytest.param(
        f.disk,
        shape(disk="100Gi"),
        worker(disk="200Gi", disk_free=100 * GiB - 1),
        (R.DISK, False, "107374182400 B", "107374182399 B free", "has 107374182399 B of 200.0 GiB disk free"),
        id="disk: one byte short (busy)",
    ),
    pytest.param(
        f.disk,
        shape(disk="200Gi"),
        worker(disk="100Gi"),
        (R.DISK, True, "200.0 GiB", "100.0 GiB total", "has only 100.0 GiB disk"),
        id="disk: total too small (permanent)",
    ),
    pytest.param(
        f.disk,
        shape(disk="50Gi"),
        worker(disk="100Gi", disk_free="40Gi"),
        (R.DISK, False, "50.0 GiB", "40.0 GiB free", "has 40.0 GiB of 100.0 GiB disk free"),
        id="disk: observed free lower than allocatable",
    ),
    pytest.param(
        f.disk,
        shape(disk="50Gi"),
        worker(disk="100Gi", reserved={"disk": "60Gi"}),
        (R.DISK, False, "50.0 GiB", "40.0 GiB free", "has 40.0 GiB of 100.0 GiB disk free"),
        id="disk: reserved lowers allocatable",
    ),
    pytest.param(
        f.disk,
        shape(disk="50Gi"),
        worker(disk="100Gi", disk_free="80Gi", reserved={"disk": "45Gi"}, unreported={"disk": "45Gi"}),
        (R.DISK, False, "50.0 GiB", "35.0 GiB free", "has 35.0 GiB of 100.0 GiB disk free"),
        id="disk: reserved since report (unreported) lowers observed",
    ),
    # --- packages -----------------------------------------------------------------------------
    pytest.param(
        f.packages,
        shape(packages=["torch>=2"]),
        worker(packages={"torch": "2.1.0+cu121"}),
        None,
        id="packages: satisfied",
    ),
    pytest.param(
        f.packages,
        shape(packages=["torch>=2"]),
        worker(),
        (R.PACKAGE, True, "torch>=2", "not installed", "lacks torch>=2"),
        id="packages: missing package",
    ),
    pytest.param(
        f.packages,
        shape(packages=["torch>=2"]),
        worker(packages={"torch": "1.13.1"}),
        (R.PACKAGE, True, "torch>=2", "torch 1.13.1", "has torch 1.13.1, not torch>=2"),
        id="packages: version too old",
    ),
    pytest.param(
        f.packages,
        shape(packages=["numpy", "pandas>=1.3.0"]),
        worker(packages={"numpy": "1.26.4", "pandas": "1.2.5"}),
        (R.PACKAGE, True, "pandas>=1.3.0", "pandas 1.2.5", "has pandas 1.2.5, not pandas>=1.3.0"),
        id="packages: the one unmet of several",
    ),
    pytest.param(
        f.packages,
        shape(packages=["numpy>=2", "torch", "pandas>=1.3.0", "scipy"]),
        worker(packages={"numpy": "1.26.4", "pandas": "1.2.5"}),
        (
            R.PACKAGE,
            True,
            "numpy>=2, torch, pandas>=1.3.0, scipy",
            "numpy 1.26.4, torch not installed, pandas 1.2.5, scipy not installed",
            "has numpy 1.26.4, not numpy>=2, and has pandas 1.2.5, not pandas>=1.3.0, and lacks torch and scipy",
        ),
        id="packages: every unmet named",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("check", "shp", "view", "expected"), CASES)
def test_filter_boundary(check, shp, view, expected):
    got = check(shp, view, Room(view))
    if expected is None:
        assert got is None
        assert rejections(shp, view) == []
        assert permanent_rejection(shp, view) is None
        return
    assert got is not None
    assert (got.reason, got.permanent, got.wanted, got.offered, got.detail) == expected
    assert got.busy is not got.permanent
    # Each row varies one field, so the whole filter chain rejects for that reason alone.
    assert rejections(shp, view) == [got]
    # Judged idle, a busy rejection disappears and a permanent one stays.
    assert permanent_rejection(shp, view) == (got if got.permanent else None)


def test_plural_text_matches_detail():
    view = worker(cpu=4, cpu_available=2)
    [rejection] = rejections(shape(cpu=4), view)
    assert rejection.detail == "has 2 of 4 cores free"
    assert rejection.plural == "have 2 of 4 cores free"
    [label] = rejections(shape(affinity={"role": "training"}), worker())
    assert (label.detail, label.plural) == ("lacks label role=training", "lack label role=training")


# ---- free = min(observed - unreported, total - reserved) -----------------------------------------

FREE = [
    pytest.param(worker(cpu=4), (4, 16 * GiB, 100 * GiB), id="idle worker offers its totals"),
    pytest.param(
        worker(
            cpu=8, memory="32Gi", disk="200Gi", cpu_available=3, memory_available="10Gi", disk_free="50Gi"
        ),
        (3, 10 * GiB, 50 * GiB),
        id="observed free lower than allocatable",
    ),
    pytest.param(
        worker(cpu=8, reserved={"cpu": 5, "memory": "30Gi", "disk": "150Gi"}, memory="32Gi", disk="200Gi"),
        (3, 2 * GiB, 50 * GiB),
        id="reserved, already reflected in the report",
    ),
    pytest.param(
        worker(
            cpu=8,
            memory="32Gi",
            disk="200Gi",
            cpu_available=6,
            memory_available="24Gi",
            disk_free="180Gi",
            reserved={"cpu": 2, "memory": "4Gi", "disk": "10Gi"},
            unreported={"cpu": 2, "memory": "4Gi", "disk": "10Gi"},
        ),
        (4, 20 * GiB, 170 * GiB),
        id="reserved since report (unreported) lowers observed",
    ),
    pytest.param(
        worker(cpu=4, memory="8Gi", disk="10Gi", cpu_available=64, memory_available="1Ti", disk_free="1Ti"),
        (4, 8 * GiB, 10 * GiB),
        id="observed above allocatable is capped at the total",
    ),
    pytest.param(
        worker(cpu=4, cpu_available=1, reserved={"cpu": 2}, unreported={"cpu": 2}),
        (0, 16 * GiB, 100 * GiB),
        id="never below zero",
    ),
]


@pytest.mark.parametrize(("view", "expected"), FREE)
def test_free_is_min_of_observed_and_allocatable(view, expected):
    room = Room(view)
    assert (view.free_cpu, view.free_memory, view.free_disk) == expected
    assert (room.cpu, room.memory, room.disk) == expected


GPU_FREE = [
    pytest.param(worker(gpus=0), (), id="worker without GPUs"),
    pytest.param(worker(gpus=["10Gi", "70Gi", "40Gi"]), (1, 2, 0), id="most free VRAM first"),
    pytest.param(worker(gpus=["40Gi", "40Gi", "40Gi"]), (0, 1, 2), id="ties by index"),
    pytest.param(worker(gpus=["10Gi", 0, "40Gi"]), (2, 0), id="GPU with zero free VRAM excluded"),
    pytest.param(worker(gpus=3, held_gpus={1}), (0, 2), id="GPU held by running execution excluded"),
    pytest.param(worker(gpus=2, held_gpus={0, 1}), (), id="every GPU held"),
]


@pytest.mark.parametrize(("view", "expected"), GPU_FREE)
def test_free_gpus(view, expected):
    assert view.free_gpus == expected
    assert Room(view).gpus == list(expected)


# ---- the chain as a whole ------------------------------------------------------------------------


def test_rejections_lists_every_reason_in_filter_order():
    view = worker(cpu=2, memory="4Gi", disk="1Gi", active=16, packages={})
    shp = shape(cpu=4, memory="8Gi", gpu=1, disk="2Gi", packages=["numpy"], affinity={"role": "training"})
    got = rejections(shp, view)
    assert [r.reason for r in got] == [R.LABEL, R.CAPACITY, R.CPU, R.MEMORY, R.GPU, R.DISK, R.PACKAGE]
    assert [r.permanent for r in got] == [True, False, True, True, True, True, True]
    paused_node = worker(
        cpu=2, memory="4Gi", disk="1Gi", active=16, packages={}, runtimes=["node 20"], paused=True
    )
    got = rejections(shp, paused_node)
    assert [r.reason for r in got][:3] == [R.RUNTIME, R.PAUSED, R.LABEL]


def test_paused_worker_fits_nothing_now_but_everything_idle():
    view = worker(paused=True)
    assert not fits_now(shape(), Room(view))
    assert permanent_rejection(shape(), view) is None
    assert Room(worker()).paused is False


def test_runtime_is_part_of_the_shape_and_the_profile():
    assert shape(runtime="node") != shape() and hash(shape(runtime="node")) != hash(shape())
    assert worker(runtimes=["node 20"]).profile != worker().profile


def test_empty_shape_fits_any_worker_with_a_slot():
    view = worker(cpu=0, memory=0, disk=0, cpu_available=0)
    assert rejections(shape(), view) == []
    assert fits_now(shape(), Room(view))


def test_all_declared_fields_must_hold_at_once():
    shp = shape(cpu=2, memory="4Gi", gpu=1, disk="10Gi")
    assert rejections(shp, worker(gpus=1)) == []
    short = worker(gpus=1, disk_free="9Gi")
    assert [r.reason for r in rejections(shp, short)] == [R.DISK]


def test_permanent_rejection_judges_the_worker_idle():
    # Busy on every quantity and at capacity, yet it would fit idle.
    view = worker(cpu=4, gpus=1, active=16, cpu_available=0, memory_available=0, disk_free=0, held_gpus={0})
    shp = shape(cpu=4, memory="16Gi", gpu=1, disk="100Gi")
    assert {r.reason for r in rejections(shp, view)} == {R.CAPACITY, R.CPU, R.MEMORY, R.GPU, R.DISK}
    assert all(r.busy for r in rejections(shp, view))
    assert permanent_rejection(shp, view) is None


def test_permanent_rejection_skips_busy_reasons_for_the_first_permanent_one():
    view = worker(cpu=4, active=16, cpu_available=0, memory="8Gi")
    got = permanent_rejection(shape(cpu=2, memory="16Gi"), view)
    assert got is not None and got.reason is R.MEMORY and got.permanent


FITS_NOW = [
    pytest.param(shape(cpu=4), worker(cpu=4), True, id="exact fit"),
    pytest.param(shape(cpu=4), worker(cpu=4, cpu_available=3), False, id="one core short"),
    pytest.param(shape(memory="1Gi"), worker(memory_available=GiB - 1), False, id="one byte short"),
    pytest.param(shape(disk="1Gi"), worker(disk_free=GiB - 1), False, id="one disk byte short"),
    pytest.param(shape(gpu=2), worker(gpus=["1Gi", 0]), False, id="GPU with zero free VRAM"),
    pytest.param(shape(gpu=1), worker(gpus=1, held_gpus={0}), False, id="GPU held by running execution"),
    pytest.param(shape(), worker(active=16), False, id="at capacity"),
    pytest.param(shape(), worker(active=15), True, id="one slot left"),
]


@pytest.mark.parametrize(("shp", "view", "expected"), FITS_NOW)
def test_fits_now_agrees_with_rejections(shp, view, expected):
    assert fits_now(shp, Room(view)) is expected
    assert (rejections(shp, view) == []) is expected


def test_room_take_subtracts_and_assigns_most_free_gpus():
    room = Room(worker(cpu=8, memory="32Gi", disk="100Gi", gpus=["10Gi", "70Gi", "40Gi"], active=1))
    assert room.take(3, 4 * GiB, 10 * GiB, 2) == (1, 2)
    assert (room.cpu, room.memory, room.disk, room.gpus, room.active) == (5, 28 * GiB, 90 * GiB, [0], 2)
    assert room.take(0, 0, 0, 0) == ()
    assert room.active == 3


# ---- gpu_memory beside the gpu count -------------------------------------------------------------


def test_gpu_memory_says_nothing_when_the_gpu_count_is_already_short():
    # One reason per problem: "has only 1 GPU", not also "has no GPU with 20 GiB".
    assert [r.reason for r in rejections(shape(gpu=2, gpu_memory="20Gi"), worker(gpus=1))] == [Reason.GPU]
    busy = worker(gpus=2, held_gpus={0})
    assert [r.reason for r in rejections(shape(gpu=2, gpu_memory="20Gi"), busy)] == [Reason.GPU]


def test_with_gpu_memory_the_count_still_counts_any_free_vram():
    [rejection] = rejections(shape(gpu=1, gpu_memory="20Gi"), worker(gpus=["10Gi"]))
    assert rejection.reason is Reason.GPU_MEMORY and rejection.busy
    assert rejection.plural == "have no GPU with 20.0 GiB free"


def test_without_gpu_memory_the_seed_semantics_hold():
    # Any free VRAM counts, most free first, exactly as before gpu_memory existed.
    view = worker(gpus=[1, "10Gi", "70Gi"])
    assert rejections(shape(gpu=3), view) == []
    assert Room(view).take(0, 0, 0, 2) == (2, 1)


@pytest.mark.parametrize(
    ("free", "request_", "assigned", "left"),
    [
        pytest.param(["80Gi", "24Gi", "30Gi"], (1, "20Gi"), (1,), [0, 2], id="best fit: the smallest that fits"),
        pytest.param(["80Gi", "24Gi", "30Gi"], (2, "25Gi"), (0, 2), [1], id="the only two that fit"),
        pytest.param(["80Gi", "24Gi", "30Gi", "26Gi"], (2, "25Gi"), (2, 3), [0, 1], id="the two smallest that fit"),
        pytest.param(["20Gi", "20Gi"], (1, "20Gi"), (1,), [0], id="exact fit, ties by index"),
    ],
)  # fmt: skip
def test_room_take_with_gpu_memory_assigns_the_best_fit(free, request_, assigned, left):
    room = Room(worker(gpus=free))
    count, vram = request_
    shp = shape(gpu=count, gpu_memory=vram)
    assert fits_now(shp, room)
    assert room.take(0, 0, 0, count, shp.requests.gpu_memory) == assigned
    assert room.gpus == left
    # What is left is what a later request sees: the roomy device stays while a smaller one fits.
    assert fits_now(shape(gpu=1, gpu_memory="80Gi"), room) is (0 in left and free[0] == "80Gi")


def test_permanent_gpu_memory_judges_device_sizes_not_current_free():
    view = worker(gpus=["1Gi", "1Gi"], gpu_memory="40Gi", held_gpus={0, 1})
    assert permanent_rejection(shape(gpu=2, gpu_memory="40Gi"), view) is None
    rejection = permanent_rejection(shape(gpu=2, gpu_memory="41Gi"), view)
    assert rejection is not None and rejection.reason is Reason.GPU_MEMORY
    assert rejection.detail == "has no GPU with 41.0 GiB total"


def test_devices_too_small_are_infeasible_even_while_busy():
    [count, vram] = rejections(shape(gpu=1, gpu_memory="81Gi"), worker(gpus=1, held_gpus={0}))
    assert (count.reason, count.permanent) == (Reason.GPU, False)
    assert (vram.reason, vram.permanent, vram.detail) == (
        Reason.GPU_MEMORY,
        True,
        "has no GPU with 81.0 GiB total",
    )
