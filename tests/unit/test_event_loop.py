"""The processes' event loop: uvloop when importable, asyncio's own when turned off or missing."""

from __future__ import annotations

import asyncio
import sys

import pytest

from flux.cli import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_runs_the_processes_when_it_is_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_asyncio_keeps_its_own_loop_when_asked(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.run(_loop_module()).startswith("asyncio")


def test_a_missing_uvloop_falls_back_silently(monkeypatch):
    monkeypatch.delenv(event_loop.ENV, raising=False)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert event_loop.loop_factory() is None
    assert event_loop.run(_loop_module()).startswith("asyncio")
