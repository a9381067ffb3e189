"""Worker pools: declarations, learned shapes and demand per pool (flux/matching/pools/)."""

from __future__ import annotations

import json

import pytest

from flux.matching import FeasibilityCache
from flux.matching.pools import (
    DECLARED,
    LEARNED,
    POOL_LABEL,
    PoolSpec,
    compute_demand,
    could_run,
    could_run_text,
    learned,
    merge_specs,
    parse_pool,
    parse_pools,
)
from tests.unit.fleet import GiB, shape, worker

A100 = {
    "name": "a100",
    "labels": {"gpu": "a100"},
    "resources": {"cpu": 8, "memory": "64Gi", "gpu": 2, "gpu_memory": "80Gi", "disk": "100Gi"},
    "runtime": "python 3.12",
    "packages": {"torch": "2.4.0"},
    "max": 10,
}
CPU = {"name": "cpu", "resources": {"cpu": 4, "memory": "16Gi"}, "min": 1}


def pools(*docs: dict) -> list[PoolSpec]:
    return parse_pools({"pools": list(docs)})


def test_declaration_is_parsed_with_quantities_and_defaults():
    (a100,) = pools(A100)
    assert (a100.cpu, a100.memory, a100.gpu, a100.gpu_memory) == (8, 64 * GiB, 2, 80 * GiB)
    assert a100.capacity == 16 and a100.min_workers == 0 and a100.max_workers == 10
    assert a100.source == DECLARED
    view = a100.view()
    assert view.labels == {"gpu": "a100", POOL_LABEL: "a100"}
    assert view.software.packages == {"torch": "2.4.0"}
    assert view.software.runtime_names == {"python"}


def test_declaration_round_trips_through_its_document():
    (a100,) = pools(A100)
    assert parse_pool(json.loads(json.dumps(a100.to_document()))) == a100


def test_a_single_pool_or_a_list_is_accepted_too():
    assert parse_pools(CPU)[0].name == "cpu"
    assert [p.name for p in parse_pools([CPU, A100])] == ["cpu", "a100"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"pools": [{"resources": {}}]}, "pools[0].name must be"),
        ({"pools": [{"name": "bad name"}]}, "pools[0].name must be"),
        ({"pools": [{"name": "a", "resources": {"memory": "lots"}}]}, "pools[0].resources.memory"),
        (
            {"pools": [{"name": "a", "resources": {"cpu": -1}}]},
            "pools[0].resources.cpu must be a whole number",
        ),
        ({"pools": [{"name": "a", "resources": {"cpus": 1}}]}, "pools[0].resources has unknown key(s) cpus"),
        ({"pools": [{"name": "a", "min": 3, "max": 2}]}, "pools[0].min (3) must be at most pools[0].max"),
        ({"pools": [{"name": "a", "capacity": 0}]}, "pools[0].capacity must be at least 1"),
        ({"pools": [{"name": "a", "labels": {POOL_LABEL: "b"}}]}, "must not set flux/pool"),
        ({"pools": [{"name": "a", "resources": {"gpu_memory": "8Gi"}}]}, "set resources.gpu too"),
        ({"pools": [{"name": "a", "packages": ["torch>=2"]}]}, "'name==version'"),
        ({"pools": [{"name": "a"}, {"name": "a"}]}, "pool 'a' is declared twice"),
        ({"pools": [{"name": "a", "size": 3}]}, "pools[0] has unknown key(s) size"),
        ({"pools": "a100"}, "pools must be a list of pools"),
        ({"pools": [], "extra": 1}, "the one key 'pools'"),
    ],
    ids=[
        "no name",
        "bad name",
        "bad memory",
        "negative cpu",
        "unknown resource",
        "min above max",
        "zero capacity",
        "reserved label",
        "vram without gpus",
        "package without version",
        "duplicate",
        "unknown key",
        "not a list",
        "extra top-level key",
    ],
)
def test_bad_declarations_name_the_field(document, message):
    with pytest.raises((ValueError, TypeError)) as caught:
        parse_pools(document)
    assert message in str(caught.value)


def test_learned_shape_is_the_workers_totals_without_the_pool_label():
    view = worker("w1", cpu=8, memory="32Gi", gpus=2, labels={"gpu": "a100", POOL_LABEL: "a100"}, capacity=4)
    spec = learned("a100", view)
    assert (spec.cpu, spec.memory, spec.gpu, spec.gpu_memory, spec.capacity) == (8, 32 * GiB, 2, 80 * GiB, 4)
    assert spec.labels == {"gpu": "a100"} and spec.source == LEARNED


def test_a_declaration_wins_over_the_learned_shape():
    (declared,) = pools(CPU)
    other = learned("cpu", worker("w", cpu=2))
    merged = merge_specs([declared], [other, learned("x", worker("x"))])
    assert [(s.name, s.source) for s in merged] == [("cpu", DECLARED), ("x", LEARNED)]


def test_gpu_work_on_an_empty_gpu_pool_asks_for_workers_by_gpu_count():
    specs = pools(A100, CPU)
    # 5 executions of one GPU each: two per a100 worker -> 3 workers; the CPU pool gets none.
    demand = compute_demand(specs, [], [(shape(gpu=1), 5)])
    assert (demand["a100"].pending, demand["a100"].needed, demand["a100"].desired) == (5, 3, 3)
    assert demand["a100"].active
    assert (demand["cpu"].pending, demand["cpu"].needed, demand["cpu"].desired) == (0, 0, 1)  # min 1
    assert not demand["cpu"].active


def test_each_pending_shape_is_counted_once_in_the_pool_the_matcher_would_choose_first():
    big = {"name": "big", "resources": {"cpu": 16, "memory": "64Gi"}}
    small = {"name": "small", "resources": {"cpu": 4, "memory": "16Gi"}}
    specs = pools(big, small)
    # No workers: pools by name, so "big" comes first for what both could run.
    demand = compute_demand(specs, [], [(shape(cpu=2), 10), (shape(cpu=8), 3)])
    assert demand["big"].pending == 13 and demand["small"].pending == 0
    # "small" has the least loaded connected worker: the matcher would go there first.
    fleet = [
        worker("s1", cpu=4, labels={POOL_LABEL: "small"}),
        worker("b1", cpu=16, memory="64Gi", labels={POOL_LABEL: "big"}, active=3, capacity=4),
    ]
    demand = compute_demand(specs, fleet, [(shape(cpu=2), 10), (shape(cpu=8), 3)])
    assert demand["small"].pending == 10  # cpu=2 fits small
    assert demand["big"].pending == 3  # cpu=8 only ever fits big
    assert sum(d.pending for d in demand.values()) == 13


def test_workers_needed_counts_busy_workers_and_packs_shapes_by_their_tightest_resource():
    specs = pools({"name": "p", "resources": {"cpu": 4, "memory": "16Gi"}, "capacity": 3})
    fleet = [
        worker("p1", cpu=4, labels={POOL_LABEL: "p"}, active=1, capacity=3),
        worker("p2", cpu=4, labels={POOL_LABEL: "p"}, active=0, capacity=3),
    ]
    # cpu=2 -> 2 per worker; memory 8Gi -> 2 per worker; no request -> capacity 3 per worker.
    demand = compute_demand(specs, fleet, [(shape(cpu=2), 3), (shape(memory="8Gi"), 1), (shape(), 3)])
    p = demand["p"]
    # 3/2 + 1/2 + 3/3 = 3 new workers, plus the one busy worker.
    assert (p.workers, p.busy_workers, p.running, p.pending, p.needed) == (2, 1, 1, 7, 4)


def test_max_caps_what_the_pool_asks_for():
    specs = pools({**A100, "max": 2})
    assert compute_demand(specs, [], [(shape(gpu=2), 50)])["a100"].desired == 2


def test_work_no_pool_could_run_counts_nowhere():
    specs = pools(CPU)
    demand = compute_demand(specs, [], [(shape(gpu=1), 4), (shape(affinity={"zone": "x"}), 2)])
    assert demand["cpu"].pending == 0


def test_affinity_to_a_pool_by_its_label():
    specs = pools(A100, CPU)
    demand = compute_demand(specs, [], [(shape(cpu=1, affinity={POOL_LABEL: "cpu"}), 2)])
    assert demand["cpu"].pending == 2 and demand["a100"].pending == 0


def test_package_and_runtime_requirements_are_checked_against_the_declared_shape():
    specs = pools(A100, CPU)
    demand = compute_demand(specs, [], [(shape(packages=["torch>=2"]), 1), (shape(runtime="node"), 1)])
    assert demand["a100"].pending == 1 and demand["cpu"].pending == 0


def test_explain_text_names_the_pools_that_could_run_it():
    specs = pools(A100, CPU)
    demand = compute_demand(specs, [], [])
    found = could_run(shape(gpu=1), demand.values())
    assert could_run_text(found) == "pool a100 could run it (0 workers)"
    assert could_run_text(could_run(shape(cpu=1), demand.values())) == (
        "pool a100 could run it (0 workers); pool cpu could run it (0 workers)"
    )
    assert could_run_text(could_run(shape(cpu=64), demand.values())) == ""


def test_demand_over_10000_pending_and_100_pools_counts_every_execution_once():
    specs = parse_pools(
        [{"name": f"p{i}", "resources": {"cpu": 1 + i % 16, "memory": "64Gi"}} for i in range(100)]
    )
    pending = [(shape(cpu=1 + i % 16, memory=f"{1 + i % 8}Gi"), 100) for i in range(100)]  # 10,000 pending
    demand = compute_demand(specs, [], pending, FeasibilityCache())
    assert sum(d.pending for d in demand.values()) == 10_000  # its cost is bench/pools.py's figure


def test_a_pending_gang_asks_for_a_worker_per_member():
    from flux.domain.gang import Gang
    from flux.matching import Shape

    specs = pools(A100, CPU)
    # One gang of 4 members of one GPU each: two would fit a worker, but members never share one.
    gang = Shape(shape(gpu=1).requests, gang=Gang(4))
    demand = compute_demand(specs, [], [(gang, 1)])
    assert (demand["a100"].pending, demand["a100"].needed) == (1, 4)
    # Three such gangs: 12 members, two per worker at most -> 6 workers.
    assert compute_demand(specs, [], [(gang, 3)])["a100"].needed == 6
