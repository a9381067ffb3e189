"""A requirement shape: the part of an execution the matcher looks at.

Pending work is grouped by shape so a re-evaluation tests each distinct
(requests, affinity) pair once, not each pending row.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import Requirement

from flux.domain.resource_request import ResourceRequest

_EMPTY_REQUEST = ResourceRequest()


class Shape:
    """Immutable, hashable (requests, affinity) with its parsed requirements cached."""

    __slots__ = ("requests", "affinity", "requirements", "_hash")

    def __init__(self, requests: ResourceRequest | None = None, affinity: Mapping[str, str] | None = None):
        self.requests = requests or _EMPTY_REQUEST
        self.affinity: tuple[tuple[str, str], ...] = tuple(sorted((affinity or {}).items()))
        self.requirements: tuple[Requirement, ...] = self.requests.requirements
        self._hash = hash((self.requests, self.affinity))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Shape):
            return NotImplemented
        return (
            self._hash == other._hash and self.requests == other.requests and self.affinity == other.affinity
        )

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, "_hash"):
            raise AttributeError("Shape is immutable")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        affinity = f", affinity={dict(self.affinity)!r}" if self.affinity else ""
        return f"Shape({self.requests!r}{affinity})"
