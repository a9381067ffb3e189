"""A requirement shape: the part of an execution the matcher looks at.

Pending work is grouped by shape so a re-evaluation tests each distinct
(requests, affinity, runtime) once, not each pending row.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import Requirement

from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import DEFAULT_RUNTIME

_EMPTY_REQUEST = ResourceRequest()


class Shape:
    """Immutable, hashable (requests, affinity, runtime) with its parsed requirements cached."""

    __slots__ = ("requests", "affinity", "runtime", "requirements", "_hash")

    def __init__(
        self,
        requests: ResourceRequest | None = None,
        affinity: Mapping[str, str] | None = None,
        runtime: str = DEFAULT_RUNTIME,
    ):
        self.requests = requests or _EMPTY_REQUEST
        self.affinity: tuple[tuple[str, str], ...] = tuple(sorted((affinity or {}).items()))
        self.runtime = runtime
        self.requirements: tuple[Requirement, ...] = self.requests.requirements
        self._hash = hash((self.requests, self.affinity, self.runtime))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Shape):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.requests == other.requests
            and self.affinity == other.affinity
            and self.runtime == other.runtime
        )

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, "_hash"):
            raise AttributeError("Shape is immutable")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        affinity = f", affinity={dict(self.affinity)!r}" if self.affinity else ""
        runtime = f", runtime={self.runtime!r}" if self.runtime != DEFAULT_RUNTIME else ""
        return f"Shape({self.requests!r}{affinity}{runtime})"
