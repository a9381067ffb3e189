"""The fleet index gives the scheduler the same answer as the full list of views.

- a pass over a ``FleetIndex`` equals the pass over the same views as a list
  (random fleets and queues from the matching properties, whole-fleet and scoped,
  with and without a limit, with aging idle or busy);
- the index follows changes one worker at a time: after any sequence of puts
  and discards it holds exactly the latest views, and walks a shape's
  candidates in load order;
- inside the dispatcher, after any sequence of submissions, completions,
  pauses, reports and reconnects, the registry's index holds exactly the
  views of the dispatchable workers.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux.dispatcher.state.session import Scheduled
from flux.matching import Aging, FeasibilityCache, permanent_rejection, schedule
from flux.matching.index import FleetIndex
from flux.matching.view import load_key
from tests.unit.fleet import shape, worker
from tests.unit.harness import Flux, resources
from tests.unit.test_matching_properties import _as_tuples, scenarios

SETTINGS = settings(max_examples=200, deadline=None)


def _index(views, rnd: random.Random) -> FleetIndex:
    index = FleetIndex()
    shuffled = list(views)
    rnd.shuffle(shuffled)
    for view in shuffled:
        index.put(view)
    return index


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False), st.booleans(), st.sampled_from([None, 1, 3]))
def test_an_indexed_pass_places_what_the_full_scan_places(scn, rnd, scoped, limit):
    shapes = [scn.shape_objects[0]] if scoped else None
    full = schedule(scn.queue(), scn.views, shapes=shapes, limit=limit, cache=FeasibilityCache())
    indexed = schedule(
        scn.queue(), _index(scn.views, rnd), shapes=shapes, limit=limit, cache=FeasibilityCache()
    )
    assert _as_tuples(indexed) == _as_tuples(full)


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False), st.sampled_from([0.0, 1_000.0]), st.booleans())
def test_with_aging_the_indexed_pass_and_the_full_scan_agree(scn, rnd, now, starving_first):
    """At ``now`` = 1,000 every pending execution is starving (aging then reads the whole index)."""
    on_list, on_index = Aging(30.0), Aging(30.0)
    full = schedule(scn.queue(), scn.views, aging=on_list, now=now, starving_first=starving_first)
    indexed = schedule(
        scn.queue(), _index(scn.views, rnd), aging=on_index, now=now, starving_first=starving_first
    )
    assert _as_tuples(indexed) == _as_tuples(full)
    assert on_index.next_search == on_list.next_search
    assert on_index.by_execution == on_list.by_execution


_CHANGE = st.tuples(
    st.sampled_from(["put", "put", "put", "discard"]),
    st.integers(0, 7),  # which worker
    st.integers(0, 5),  # active
    st.sampled_from([1, 2, 4]),  # capacity
    st.sampled_from([1, 2, 4, 8]),  # cpu
    st.sampled_from(["a", "b"]),  # zone label
    st.booleans(),  # paused
)


@SETTINGS
@given(st.lists(_CHANGE, max_size=40))
def test_the_index_holds_the_latest_views_and_walks_candidates_in_load_order(changes):
    index, latest = FleetIndex(), {}
    wanted = [shape(), shape(cpu=2), shape(affinity={"zone": "a"}), shape(cpu=8, affinity={"zone": "b"})]
    for op, i, active, capacity, cpu, zone, paused in changes:
        name = f"w{i}"
        if op == "discard":
            index.discard(name)
            latest.pop(name, None)
        else:
            view = worker(
                name, cpu=cpu, active=active, capacity=capacity, labels={"zone": zone}, paused=paused
            )
            index.put(view)
            latest[name] = view
        assert len(index) == len(latest)
        assert {v.name: v for v in index.views()} == latest
        for wanted_shape in wanted:
            walked = [(key, view.name) for key, view in index.candidates(wanted_shape, permanent_rejection)]
            expected = sorted(
                (load_key(v), v.name)
                for v in latest.values()
                if not v.paused and v.active < v.capacity and permanent_rejection(wanted_shape, v) is None
            )
            assert walked == expected


def _full_scan(flux: Flux) -> dict[str, object]:
    return {e.name: e.view() for e in flux.d.registry.values() if e.dispatchable}


@pytest.mark.parametrize("seed", range(12))
async def test_the_dispatchers_index_matches_its_dispatchable_workers(flux: Flux, seed: int) -> None:
    rnd = random.Random(seed)
    await flux.workflow("job", cpu=1)
    await flux.workflow("zoned", cpu=2, affinity={"zone": "a"})
    workers = [
        await flux.worker(f"w{i}", cpu=rnd.choice([2, 4]), labels={"zone": rnd.choice("ab")}, capacity=2)
        for i in range(6)
    ]
    dispatched: list[tuple[object, str]] = []
    for _ in range(60):
        op = rnd.choice(
            ["run", "run", "zoned", "complete", "pause", "resume", "report", "reconnect", "drain"]
        )
        w = rnd.choice(workers)
        if op in ("run", "zoned"):
            await flux.run("job" if op == "run" else "zoned")
        elif op == "complete" and dispatched:
            owner, execution_id = dispatched.pop(rnd.randrange(len(dispatched)))
            if execution_id in flux.d.table.unfinished and flux.get(execution_id).worker == owner.name:
                owner.claim(execution_id)
                await owner.complete(execution_id)
        elif op in ("pause", "resume"):
            await flux.d.set_paused(w.name, op == "pause")
        elif op == "report" and w.session is not None and not w.session.closed:
            w.report(resources(4, cpu_available=rnd.choice([0, 1, 4])))
        elif op == "drain" and w.session is not None and not w.session.closed:
            w.report(resources(4), draining=True)
        elif op == "reconnect":
            if w.session is not None and not w.session.closed:
                w.disconnect()
            w.connect()
        for each in workers:
            dispatched.extend(
                (each, e.execution.execution_id) for e in each.events() if isinstance(e, Scheduled)
            )
        index = flux.d.registry.index()
        assert {v.name: v for v in index.views()} == _full_scan(flux)
        views = list(_full_scan(flux).values())
        assert _as_tuples(schedule(flux.d.queue, index)) == _as_tuples(schedule(flux.d.queue, views))


async def test_a_worker_is_indexed_as_it_connects_not_by_the_next_placement(flux: Flux) -> None:
    # After a connect storm the first placement used to rebuild every view at once (230 ms at
    # 10,000 workers). Each connect indexes its own worker, so nothing is left for that placement.
    workers = [await flux.worker(f"w{i}", cpu=2) for i in range(5)]
    registry = flux.d.registry
    assert not registry._changed  # nothing waits to be re-indexed
    assert {v.name: v for v in registry._index.views()} == _full_scan(flux)
    workers[0].disconnect()
    workers[0].connect()
    assert not registry._changed
    assert {v.name for v in registry._index.views()} == {w.name for w in workers}


def test_equal_profiles_are_filed_under_one_object_and_a_view_built_with_it_is_found_by_identity() -> None:
    # Each worker's software is parsed from its own registration: equal package lists, distinct
    # objects. Comparing them on every put was a tenth of a replica's placing one by one.
    packages = {f"pkg{i}": "1.0" for i in range(200)}
    first, second = worker("a", packages=dict(packages)), worker("b", packages=dict(packages))
    assert first.profile == second.profile and first.profile is not second.profile
    index = FleetIndex()
    assert index.put(first) is first.profile
    filed = index.put(second)
    assert filed is first.profile  # the group's, not the view's own
    again = dataclasses.replace(second, active=1, known_profile=filed)
    assert again.profile is filed
    assert index.put(again) is filed
    # A worker at capacity is not walked, but learns the group's profile all the same.
    assert index.put(worker("c", packages=dict(packages), active=16)) is filed
    index.discard("a")
    index.discard("b")
    # The group is gone with its last open worker: a new one is filed under its own profile.
    third = worker("d", packages=dict(packages))
    assert index.put(third) is third.profile


async def test_an_entry_keeps_its_filed_profile_until_a_report_changes_its_totals(flux: Flux) -> None:
    await flux.workflow("job", cpu=1)
    await flux.worker("w1", cpu=4)
    w2 = await flux.worker("w2", cpu=4)
    entries = flux.d.registry.entries
    flux.d.registry.index()
    assert entries["w1"].profile is entries["w2"].profile
    await flux.run("job")  # w1's view is built again, with the profile its group is filed under
    flux.d.registry.index()
    assert entries["w1"].view().profile is entries["w1"].profile is entries["w2"].profile
    kept = entries["w2"].profile
    w2.report(resources(4, cpu_available=1))  # only what is free changed, as most reports do
    assert entries["w2"].profile is kept
    w2.report(resources(8))  # new totals: a profile of its own, in a group of its own
    index = flux.d.registry.index()
    assert entries["w2"].profile is not entries["w1"].profile
    assert entries["w2"].view().profile.cpu_total == 8
    assert {v.name: v for v in index.views()} == _full_scan(flux)
    w2.report(resources(4))  # equal again: back under the first group's profile
    flux.d.registry.index()
    assert entries["w2"].profile is entries["w1"].profile


def test_a_profile_knows_its_totals_from_what_is_free() -> None:
    view = worker("a", cpu=4, gpus=["80Gi", "40Gi"], cpu_available=1)
    profile, reported = view.profile, view.resources
    assert profile.totals_of(dataclasses.replace(reported, cpu_available=4, memory_available=0))
    assert profile.totals_of(dataclasses.replace(reported, gpus=tuple(reversed(reported.gpus))))
    for changed in (
        dataclasses.replace(reported, cpu_total=8),
        dataclasses.replace(reported, memory_total=reported.memory_total // 2),
        dataclasses.replace(reported, disk_total=0),
        dataclasses.replace(reported, gpus=reported.gpus[:1]),
        dataclasses.replace(
            reported, gpus=(dataclasses.replace(reported.gpus[0], memory_total=1), *reported.gpus[1:])
        ),
    ):
        assert not profile.totals_of(changed)
