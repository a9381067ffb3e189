"""The core and its modes keep the contract of flux/dispatcher/handle.py, and the stores the replicas'
modes are given keep that of flux/store/shared.py (checked by member, at runtime)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import get_type_hints

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.handle import Binder, FleetDirectory, Handle, PendingFeed, Reclaiming
from flux.dispatcher.modes.local import local
from flux.dispatcher.modes.shared.binder import SharedBinder
from flux.dispatcher.modes.shared.feed import SharedFeed
from flux.dispatcher.modes.shared.fleet import SharedFleet
from flux.store.postgres import PostgresStore
from flux.store.shared import ClusterMembership, SharedStore
from tests.unit.memory_store import MemoryStore
from tests.unit.shared_memory_store import SharedMemoryStore


def test_the_dispatcher_is_the_handle_its_parts_are_given() -> None:
    d = Dispatcher(MemoryStore())
    assert isinstance(d, Handle)
    assert isinstance(d.reclaimer, Reclaiming)


def test_every_mode_implements_its_strategy() -> None:
    one = local()
    assert isinstance(one.binder, Binder)
    assert isinstance(one.feed, PendingFeed)
    assert isinstance(one.fleet, FleetDirectory)
    for shared, protocol in (
        (SharedBinder, Binder),
        (SharedFeed, PendingFeed),
        (SharedFleet, FleetDirectory),
    ):
        missing = [name for name in _members(protocol) if not hasattr(shared, name)]
        assert not missing, f"{shared.__name__} lacks {missing}"


def test_every_shared_store_provides_the_protocol_called_alike() -> None:
    """PostgreSQL's store (by its class: no database is reached) and the unit tests' in-memory one:
    each member of SharedStore, and of ClusterMembership on the class its ``cluster`` is declared as,
    with the same parameters and async where the protocol's is, so the protocol cannot drift."""
    for store in (PostgresStore, SharedMemoryStore):
        cluster = get_type_hints(store)["cluster"]
        assert _drift(store, SharedStore) == []
        assert _drift(cluster, ClusterMembership) == []
    one = SharedMemoryStore()
    assert isinstance(one, SharedStore) and isinstance(one.cluster, ClusterMembership)


def _drift(cls: type, protocol: type) -> list[str]:
    """Where ``cls`` departs from ``protocol``: members it lacks; methods whose parameters differ
    (by name, and by which have a default) or that are a coroutine where the protocol's is not."""
    found = []
    for name in _members(protocol):
        wanted = vars(protocol).get(name)
        if not any(name in vars(k) or name in inspect.get_annotations(k) for k in cls.__mro__):
            found.append(f"{cls.__name__} lacks {name}")
        elif inspect.isfunction(wanted):
            got = getattr(cls, name)
            if not inspect.isfunction(got):
                found.append(f"{cls.__name__}.{name} is not a method")
            elif _parameters(got) != _parameters(wanted):
                found.append(
                    f"{cls.__name__}.{name}{inspect.signature(got)} is not {inspect.signature(wanted)}"
                )
            if inspect.iscoroutinefunction(got) != inspect.iscoroutinefunction(wanted):
                found.append(f"{cls.__name__}.{name} is async where the protocol's is not, or the reverse")
    return found


def _parameters(function: Callable[..., object]) -> list[tuple[str, bool]]:
    """Each parameter's name, and whether it has a default."""
    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.default is not inspect.Parameter.empty) for p in parameters]


def _members(protocol: type) -> list[str]:
    """What a protocol class declares (its methods and annotated attributes)."""
    declared = [name for name in vars(protocol) if not name.startswith("_")]
    return declared + list(getattr(protocol, "__annotations__", {}))
