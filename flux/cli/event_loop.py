"""The event loop the server, gateway and worker processes run on.

uvloop where it is installed (a dependency, but a platform without a wheel may lack
it): its loop does less per callback and per socket read than asyncio's, and the
dispatch path is thousands of small callbacks a second. ``FLUX_EVENT_LOOP=asyncio``
keeps asyncio's own loop (to compare, or to rule the loop out when hunting a bug).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "FLUX_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop, or None (asyncio's default) when it is missing or turned off."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``loop_factory`` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
