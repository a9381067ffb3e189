"""The core and its modes keep the contract of flux/dispatcher/handle.py (checked by member, at runtime)."""

from __future__ import annotations

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.handle import Binder, FleetDirectory, Handle, PendingFeed, Reclaiming
from flux.dispatcher.modes.local import local
from flux.dispatcher.modes.shared.binder import SharedBinder
from flux.dispatcher.modes.shared.feed import SharedFeed
from flux.dispatcher.modes.shared.fleet import SharedFleet
from tests.unit.memory_store import MemoryStore


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


def _members(protocol: type) -> list[str]:
    """What a protocol class declares (its methods and annotated attributes)."""
    declared = [name for name in vars(protocol) if not name.startswith("_")]
    return declared + list(getattr(protocol, "__annotations__", {}))
