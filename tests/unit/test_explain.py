"""Why is this execution pending? Per-worker verdicts and the one-line summary (DESIGN §3, Explain)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flux.domain.worker import ResourceLimit
from flux.matching import Reason, WorkerView, explain
from tests.unit.fleet import GiB, shape, worker

TRAINING = {"role": "training"}


def test_design_example_is_reproduced_exactly():
    fleet = [
        worker("a", cpu=8),
        worker("b", cpu=8),
        worker("c", cpu=4, cpu_available=2, labels=TRAINING),
    ]
    got = explain(shape(cpu=4, affinity=TRAINING), fleet)
    assert got.summary == "0/3 workers can run it: 2 lack label role=training, 1 has 2 of 4 cores free"
    assert got.capable == 0
    assert not got.infeasible  # "c" would fit idle: the execution is busy, not infeasible


def test_no_workers_connected():
    got = explain(shape(cpu=1), [])
    assert got.summary == "0/0 workers can run it: no worker is connected"
    assert got.verdicts == ()
    assert got.capable == 0
    assert got.infeasible


def test_every_worker_can_run_it():
    got = explain(shape(cpu=1), [worker("a"), worker("b")])
    assert got.summary == "2/2 workers can run it"
    assert got.capable == 2
    assert not got.infeasible
    assert all(v.fits and v.primary is None and not v.permanent for v in got.verdicts)


def test_some_workers_can_run_it():
    got = explain(shape(gpu=1), [worker("a", gpus=1), worker("b"), worker("c", gpus=1, held_gpus={0})])
    assert got.summary == "1/3 workers can run it: 1 has no GPUs, 1 has 0 of 1 GPU free"
    assert got.capable == 1


def test_verdicts_are_per_worker_sorted_by_name_with_every_reason():
    fleet = [worker("z", cpu=2, labels=TRAINING), worker("m", cpu=8, active=16), worker("a", cpu=8)]
    got = explain(shape(cpu=4, affinity=TRAINING), fleet)
    assert [v.worker for v in got.verdicts] == ["a", "m", "z"]
    a, m, z = got.verdicts
    assert [r.reason for r in a.rejections] == [Reason.LABEL]
    assert [r.reason for r in m.rejections] == [Reason.LABEL, Reason.CAPACITY]
    assert [r.reason for r in z.rejections] == [Reason.CPU]
    assert (a.permanent, m.permanent, z.permanent) == (True, True, True)
    assert got.infeasible


# (fleet, shape, infeasible?)
FEASIBILITY = [
    pytest.param([worker("a", cpu=2)], shape(cpu=4), True, id="only worker too small"),
    pytest.param([worker("a", cpu=4, cpu_available=0)], shape(cpu=4), False, id="only worker busy"),
    pytest.param([worker("a", active=16)], shape(), False, id="at capacity is busy"),
    pytest.param([worker("a", capacity=0)], shape(), True, id="zero capacity is infeasible"),
    pytest.param(
        [worker("a", gpus=1, held_gpus={0})], shape(gpu=1), False, id="GPU held by running execution is busy"
    ),
    pytest.param([worker("a", gpus=[0])], shape(gpu=1), False, id="GPU with zero free VRAM is busy"),
    pytest.param([worker("a")], shape(gpu=1), True, id="worker without GPUs is infeasible"),
    pytest.param([worker("a")], shape(affinity=TRAINING), True, id="label missing is infeasible"),
    pytest.param([worker("a")], shape(packages=["torch"]), True, id="missing package is infeasible"),
    pytest.param(
        [worker("a", cpu=2), worker("b", cpu=8, reserved={"cpu": 8})],
        shape(cpu=4),
        False,
        id="one small, one busy: busy",
    ),
    pytest.param(
        [worker("a", cpu=2), worker("b", cpu=8, cpu_available=3, labels={"role": "x"})],
        shape(cpu=4, affinity={"role": "x"}),
        False,
        id="one worker infeasible, the labelled one busy",
    ),
    pytest.param(
        [worker("a", cpu=8), worker("b", cpu=2, labels={"role": "x"})],
        shape(cpu=4, affinity={"role": "x"}),
        True,
        id="each worker misses one thing: infeasible",
    ),
    pytest.param(
        [worker("a", cpu=8, active=16, memory="4Gi")],
        shape(cpu=4, memory="8Gi"),
        True,
        id="busy and too small: infeasible",
    ),
]


@pytest.mark.parametrize(("fleet", "shp", "infeasible"), FEASIBILITY)
def test_infeasible_versus_busy(fleet, shp, infeasible):
    got = explain(shp, fleet)
    assert got.infeasible is infeasible
    assert got.capable == 0
    assert all(v.rejections for v in got.verdicts)


def test_primary_reason_prefers_the_permanent_one():
    # At capacity (busy) is listed before the missing package (permanent).
    got = explain(shape(packages=["torch"]), [worker("a", active=16)])
    [verdict] = got.verdicts
    assert [r.reason for r in verdict.rejections] == [Reason.CAPACITY, Reason.PACKAGE]
    assert verdict.primary is verdict.rejections[1]
    # The summary names both: the user must change the package, and will then wait for a slot.
    assert got.summary == "0/1 workers can run it: 1 is at capacity (16/16 executions), 1 lacks torch"


def test_primary_reason_is_the_first_when_all_are_busy():
    view = worker("a", active=16, cpu_available=0)
    [verdict] = explain(shape(cpu=1), [view]).verdicts
    assert verdict.primary is verdict.rejections[0]
    assert verdict.primary.reason is Reason.CAPACITY
    assert not verdict.permanent


def test_summary_groups_by_reason_largest_first():
    fleet = [
        worker("a", gpus=0),
        worker("b", gpus=0),
        worker("c", gpus=0),
        worker("d", gpus=1, held_gpus={0}),
        worker("e", gpus=2, active=16),
        worker("f", gpus=2, active=16),
    ]
    got = explain(shape(gpu=1), fleet)
    assert got.summary == (
        "0/6 workers can run it: 3 have no GPUs, 2 are at capacity (16/16 executions), 1 has 0 of 1 GPU free"
    )


def test_summary_ties_keep_worker_name_order():
    fleet = [worker("b-small", cpu=2), worker("a-busy", cpu=8, cpu_available=1)]
    got = explain(shape(cpu=4), fleet)
    assert got.summary == "0/2 workers can run it: 1 has 1 of 8 cores free, 1 has only 2 cores"


def test_summary_beyond_four_groups_counts_the_rest_by_kind():
    fleet = [
        worker("a", labels={"role": "a"}),
        worker("b", labels={"role": "b"}),
        worker("b2", labels={"role": "b"}),
        worker("c", labels={"role": "c"}),
        worker("d", labels={"role": "d"}),
        worker("e", labels={"role": "e"}),
        worker("f", labels={"role": "f"}),
    ]
    got = explain(shape(affinity=TRAINING), fleet)
    assert got.summary == (
        "0/7 workers can run it: 2 have label role=b, not role=training, "
        "1 has label role=a, not role=training, 1 has label role=c, not role=training, "
        "1 has label role=d, not role=training, 2 more have other labels"
    )


def test_summary_counts_every_reason_of_every_worker():
    # The issue's fleet: two small CPU-only workers without torch or transformers.
    fleet = [worker("a", cpu=2), worker("b", cpu=2)]
    shp = shape(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"])
    got = explain(shp, fleet)
    assert got.summary == (
        "0/2 workers can run it: 2 have only 2 cores, 2 have no GPUs, 2 lack torch>=2.0.0 and transformers"
    )
    assert got.infeasible
    for verdict in got.verdicts:
        assert [r.reason for r in verdict.rejections] == [Reason.CPU, Reason.GPU, Reason.PACKAGE]


def test_summary_ranks_reasons_by_workers_held_back():
    fleet = [
        worker("a", cpu=2, packages={"torch": "1.13.1"}),
        worker("b", cpu=8, cpu_available=1, packages={"torch": "2.2"}),
        worker("c", cpu=2),
    ]
    got = explain(shape(cpu=4, packages=["torch>=2"]), fleet)
    assert got.summary == (
        "0/3 workers can run it: 2 have only 2 cores, 1 has torch 1.13.1, not torch>=2, "
        "1 has 1 of 8 cores free, 1 lacks torch>=2"
    )
    assert not got.infeasible  # b would fit idle


def test_summary_lists_every_missing_label_and_package():
    fleet = [worker("a", labels={"zone": "b"}), worker("b", labels={"zone": "b"}, packages={"numpy": "1.0"})]
    shp = shape(affinity={"role": "training", "zone": "a", "tier": "gold"}, packages=["numpy>=2", "scipy"])
    got = explain(shp, fleet)
    assert got.summary == (
        "0/2 workers can run it: 2 lack label role=training and tier=gold, and have label zone=b, not zone=a, "
        "1 lacks numpy>=2 and scipy, 1 has numpy 1.0, not numpy>=2, and lacks scipy"
    )


def test_summary_beyond_four_groups_counts_the_workers_left_out():
    fleet = [worker(n, cpu=2, labels={"role": n}) for n in ("a", "b", "c", "d")]
    got = explain(shape(cpu=4, affinity=TRAINING), fleet)
    # Four "has label role=x" groups and one "have only 2 cores" group of four workers.
    assert got.summary == (
        "0/4 workers can run it: 4 have only 2 cores, 1 has label role=a, not role=training, "
        "1 has label role=b, not role=training, 1 has label role=c, not role=training, 1 more has other labels"
    )


def test_summary_counts_every_reason_beyond_four_groups_by_kind():
    # Six label groups, then cores, memory and a package on some of the same workers: each
    # worker beyond the first four groups is counted under every kind that holds it back.
    fleet = [
        worker("a", cpu=2, labels={"role": "a"}),
        worker("b", cpu=2, labels={"role": "b"}),
        worker("c", labels={"role": "c"}),
        worker("d", labels={"role": "d"}),
        worker("e", cpu=2, labels={"role": "e"}),
        worker("f", labels={"role": "f"}, packages={"numpy": "1.0"}),
    ]
    got = explain(shape(cpu=4, affinity=TRAINING, packages=["numpy>=2"]), fleet)
    parts = got.summary.split(": ", 1)[1].split(", ")
    # Every worker has a label reason: each is said once, either in full or in the count.
    labels = sum(int(p.split()[0]) for p in parts if "label role=" in p or "other labels" in p)
    assert labels == 6, got.summary
    cores = sum(int(p.split()[0]) for p in parts if "cores" in p)
    assert cores == 3, got.summary
    packages = sum(int(p.split()[0]) for p in parts if "numpy" in p or "package" in p)
    assert packages == 6, got.summary
    assert got.summary == (
        "0/6 workers can run it: 5 lack numpy>=2, 3 have only 2 cores, "
        "1 has label role=a, not role=training, 1 has label role=b, not role=training, "
        "4 more have other labels, 1 more lacks a required package"
    )


def test_explain_accepts_any_iterable_of_workers():
    got = explain(shape(cpu=1), (w for w in [worker("b"), worker("a")]))
    assert [v.worker for v in got.verdicts] == ["a", "b"]
    assert got.summary == "2/2 workers can run it"


def test_gpu_memory_is_its_own_reason_in_the_summary():
    fleet = [
        worker("a", gpus=["10Gi", "12Gi"]),
        worker("b", gpus=["19Gi"]),
        worker("c", gpus=["40Gi"]),
        worker("d", gpus=0),
    ]
    got = explain(shape(gpu=1, gpu_memory="20Gi"), fleet)
    assert got.summary == "1/4 workers can run it: 2 have no GPU with 20.0 GiB free, 1 has no GPUs"
    assert not got.infeasible


def test_a_container_limit_is_named_where_a_total_is_too_small():
    base = worker("pod", cpu=2, memory="4Gi")
    limits = (
        ResourceLimit("cpu", "cgroup cpu.max", 2, 64),
        ResourceLimit("memory", "cgroup memory.max", 4 * GiB, 256 * GiB),
    )
    pod = WorkerView("pod", replace(base.resources, limits=limits))
    got = explain(shape(cpu=4, memory="8Gi"), [pod])
    [verdict] = got.verdicts
    assert [r.detail for r in verdict.rejections] == [
        "has only 2 cores (cgroup cpu.max; host has 64)",
        "has only 4.0 GiB memory (cgroup memory.max; host has 256.0 GiB)",
    ]
    assert got.infeasible
