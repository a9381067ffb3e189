"""Named limits from Python: ``client.limits`` (``flux.client`` and ``flux.aio``).

Any token reads its tenant's limits; an admin token changes them (a cluster admin's may name any
tenant with ``tenant=``). Limits come back as ``flux.domain.named_limits.NamedLimit``; terms are
checked here first, so a bad one is refused naming its field before anything is sent::

    client.limits.create("openai", concurrency=10, rate="100/m", burst=10)
    client.limits.set("openai", concurrency=20)            # applies to waiting work at once
    client.limits.show("openai").keys                      # [KeyUsage(key, in_use, waiting), ...]
    client.limits.apply([{"name": "crm", "concurrency": 1, "per_key": True}])
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flux.domain.named_limits import NamedLimit
from flux.errors import InvalidArgument
from flux.v1 import limits_pb2

__all__ = ["AsyncLimitAdmin", "KeyUsage", "LimitAdmin", "LimitUsage"]


@dataclass(frozen=True, slots=True)
class KeyUsage:
    key: str
    in_use: int
    waiting: int


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """A limit and its busiest keys now (``key_count`` in all) on the server asked."""

    limit: NamedLimit
    tenant: str
    keys: list[KeyUsage]
    key_count: int


def _limit(name: str, terms: Mapping[str, Any], field: str = "limit") -> NamedLimit:
    try:
        return NamedLimit.from_dict(terms, name)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{field}: {exc}" if field != "limit" else str(exc)) from None


def _limits(limits: Iterable[NamedLimit | Mapping[str, Any]]) -> list[NamedLimit]:
    checked = []
    for index, limit in enumerate(limits):
        if isinstance(limit, NamedLimit):
            checked.append(limit)
        elif not isinstance(limit, Mapping):
            raise InvalidArgument(
                f"limits[{index}]: a limit is a mapping with a name; got {type(limit).__name__}"
            )
        else:
            checked.append(_limit(limit.get("name"), limit, f"limits[{index}]"))  # type: ignore[arg-type]
    return checked


def _to_proto(limit: NamedLimit) -> limits_pb2.Limit:
    from flux.server.limit_convert import limit_to_proto

    return limit_to_proto(limit)


def _from_proto(message: limits_pb2.Limit) -> NamedLimit:
    from flux.server.limit_convert import limit_from_proto

    return limit_from_proto(message)


def _usage(answer: limits_pb2.GetLimitResponse) -> LimitUsage:
    keys = [KeyUsage(k.key, k.in_use, k.waiting) for k in answer.keys]
    return LimitUsage(_from_proto(answer.limit), answer.limit.tenant, keys, answer.key_count)


class LimitAdmin:
    """The ``LimitService`` over a client's channel and credentials."""

    def __init__(self, call: Callable[[str, Any], Any]):
        self._call = call

    def create(self, name: str, tenant: str = "", **terms: Any) -> NamedLimit:
        """``concurrency=``, ``rate=`` ("100/m"), ``burst=``, ``per_key=``."""
        request = limits_pb2.CreateLimitRequest(limit=_to_proto(_limit(name, terms)), tenant=tenant)
        return _from_proto(self._call("CreateLimit", request).limit)

    def set(self, name: str, tenant: str = "", **changes: Any) -> NamedLimit:
        """Change some terms; None clears concurrency, rate or burst."""
        request = limits_pb2.SetLimitRequest(name=name, changes_json=json.dumps(changes), tenant=tenant)
        return _from_proto(self._call("SetLimit", request).limit)

    def delete(self, name: str, tenant: str = "") -> None:
        self._call("DeleteLimit", limits_pb2.DeleteLimitRequest(name=name, tenant=tenant))

    def list(self, tenant: str = "") -> list[NamedLimit]:
        answer = self._call("ListLimits", limits_pb2.ListLimitsRequest(tenant=tenant))
        return [_from_proto(m) for m in answer.limits]

    def get(self, name: str, tenant: str = "") -> NamedLimit:
        return self.show(name, tenant).limit

    def show(self, name: str, tenant: str = "", top: int = 10) -> LimitUsage:
        """The limit and its ``top`` busiest keys now."""
        return _usage(self._call("GetLimit", limits_pb2.GetLimitRequest(name=name, tenant=tenant, top=top)))

    def apply(self, limits: Iterable[NamedLimit | Mapping[str, Any]], tenant: str = "") -> list[NamedLimit]:
        """Create or replace each limit by name, all of them or none."""
        request = limits_pb2.ApplyLimitsRequest(
            limits=[_to_proto(lim) for lim in _limits(limits)], tenant=tenant
        )
        return [_from_proto(m) for m in self._call("ApplyLimits", request).limits]


class AsyncLimitAdmin:
    """``LimitAdmin`` for ``flux.aio``: the same calls, awaited."""

    def __init__(self, call: Callable[[str, Any], Awaitable[Any]]):
        self._call = call

    async def create(self, name: str, tenant: str = "", **terms: Any) -> NamedLimit:
        request = limits_pb2.CreateLimitRequest(limit=_to_proto(_limit(name, terms)), tenant=tenant)
        return _from_proto((await self._call("CreateLimit", request)).limit)

    async def set(self, name: str, tenant: str = "", **changes: Any) -> NamedLimit:
        request = limits_pb2.SetLimitRequest(name=name, changes_json=json.dumps(changes), tenant=tenant)
        return _from_proto((await self._call("SetLimit", request)).limit)

    async def delete(self, name: str, tenant: str = "") -> None:
        await self._call("DeleteLimit", limits_pb2.DeleteLimitRequest(name=name, tenant=tenant))

    async def list(self, tenant: str = "") -> list[NamedLimit]:
        answer = await self._call("ListLimits", limits_pb2.ListLimitsRequest(tenant=tenant))
        return [_from_proto(m) for m in answer.limits]

    async def get(self, name: str, tenant: str = "") -> NamedLimit:
        return (await self.show(name, tenant)).limit

    async def show(self, name: str, tenant: str = "", top: int = 10) -> LimitUsage:
        request = limits_pb2.GetLimitRequest(name=name, tenant=tenant, top=top)
        return _usage(await self._call("GetLimit", request))

    async def apply(
        self, limits: Iterable[NamedLimit | Mapping[str, Any]], tenant: str = ""
    ) -> list[NamedLimit]:
        request = limits_pb2.ApplyLimitsRequest(
            limits=[_to_proto(lim) for lim in _limits(limits)], tenant=tenant
        )
        return [_from_proto(m) for m in (await self._call("ApplyLimits", request)).limits]
