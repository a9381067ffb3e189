"""A requirement shape: the part of an execution the matcher looks at.

Pending work is grouped by shape so a re-evaluation tests each distinct
(requests, affinity, runtime) once, not each pending row. The tenant is part
of the shape too: one tenant's work is queued, counted against its quota and
ordered by its fair share apart from another's (the filters never look at it).
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import Requirement

from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import DEFAULT_TENANT
from flux.domain.worker import DEFAULT_RUNTIME
from flux.matching.tenancy import demand

_EMPTY_REQUEST = ResourceRequest()


class Shape:
    """Immutable, hashable (requests, affinity, runtime, tenant, placement, gang) with its parsed
    requirements cached.

    ``requests`` and ``affinity`` are per member of a gang; ``demand`` is the whole gang's, so
    quotas, fair share and preemption count a gang as one unit. ``placement``: the workflow's own
    policy (``flux.matching.placement``), ``""`` for the server's.
    """

    __slots__ = (
        "requests", "affinity", "runtime", "tenant", "placement", "gang", "requirements", "demand", "needs",
        "_hash",
    )  # fmt: skip

    def __init__(
        self,
        requests: ResourceRequest | None = None,
        affinity: Mapping[str, str] | None = None,
        runtime: str = DEFAULT_RUNTIME,
        tenant: str = DEFAULT_TENANT,
        placement: str = "",
        gang: Gang | None = None,
    ):
        self.requests = requests or _EMPTY_REQUEST
        self.gang = gang
        self.affinity: tuple[tuple[str, str], ...] = tuple(sorted((affinity or {}).items()))
        self.runtime = runtime
        self.tenant = tenant
        self.placement = placement
        self.requirements: tuple[Requirement, ...] = self.requests.requirements
        # What one execution of this shape holds against its tenant's quota.
        one = demand(self.requests)
        self.demand = one if gang is None else tuple(n * gang.size for n in one)  # type: ignore[assignment]
        # The same requirements in no tenant: what feasibility and worker choice depend on, so
        # every tenant's lane of one requirement shares one cached verdict and one walk of the fleet.
        self.needs: Shape = (
            self
            if tenant == DEFAULT_TENANT
            else _needs(self.requests, self.affinity, runtime, placement, gang)
        )
        self._hash = hash((self.requests, self.affinity, self.runtime, self.tenant, placement, gang))

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
            and self.tenant == other.tenant
            and self.placement == other.placement
            and self.gang == other.gang
        )

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, "_hash"):
            raise AttributeError("Shape is immutable")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        affinity = f", affinity={dict(self.affinity)!r}" if self.affinity else ""
        runtime = f", runtime={self.runtime!r}" if self.runtime != DEFAULT_RUNTIME else ""
        tenant = f", tenant={self.tenant!r}" if self.tenant != DEFAULT_TENANT else ""
        placement = f", placement={self.placement!r}" if self.placement else ""
        gang = f", gang={self.gang!r}" if self.gang is not None else ""
        return f"Shape({self.requests!r}{affinity}{runtime}{tenant}{placement}{gang})"

    def for_tenant(self, tenant: str) -> Shape:
        """The same requirements, queued for ``tenant``."""
        return (
            self
            if tenant == self.tenant
            else Shape(self.requests, dict(self.affinity), self.runtime, tenant, self.placement, self.gang)
        )


# One ``needs`` object per requirement, so lookups keyed by it compare by identity; shapes are
# few (workflow versions x tenants), and the bound only guards against a runaway caller.
_NEEDS: dict[tuple[ResourceRequest, tuple[tuple[str, str], ...], str, str, Gang | None], Shape] = {}
_NEEDS_MAX = 65_536


def _needs(
    requests: ResourceRequest,
    affinity: tuple[tuple[str, str], ...],
    runtime: str,
    placement: str,
    gang: Gang | None,
) -> Shape:
    key = (requests, affinity, runtime, placement, gang)
    found = _NEEDS.get(key)
    if found is None:
        if len(_NEEDS) >= _NEEDS_MAX:
            _NEEDS.clear()
        found = _NEEDS[key] = Shape(requests, dict(affinity), runtime, placement=placement, gang=gang)
    return found
