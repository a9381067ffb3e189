"""A registered workflow version, as the catalogue and the stores know it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from flux.domain.execution import WorkflowRef
from flux.domain.gang import Gang
from flux.domain.limits import Flow
from flux.domain.policy import Policy
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    name: str
    version: int
    source_hash: str
    entrypoint: str
    requests: ResourceRequest
    affinity: Mapping[str, str]
    max_attempts: int
    filename: str = ""
    # The runtime the workflow is written for (matched against worker runtimes by name).
    runtime: str = "python"
    # When this version was registered, seconds since the epoch (0 until stored).
    registered_at: float = 0.0
    # Declared with ``with_options(priority=N)``; a run may override it.
    priority: int = 0
    # The tenant whose admin registered it: only that tenant runs and lists it, unless it is
    # ``default``'s, which every tenant shares. A name belongs to one tenant.
    tenant: str = DEFAULT_TENANT
    # Timeouts and retries of its executions; None: the default with ``max_attempts``.
    policy: Policy | None = None
    # Concurrency per key, rate limit, named limits (flux.domain.limits); empty: none.
    flow: Flow = field(default_factory=Flow)
    # Several workers at once, all or none (flux.domain.gang); None: one worker.
    gang: Gang | None = None
    # Its placement policy ("spread" or "binpack", flux.matching.placement); "": the server's.
    placement: str = ""
    # Set on a record register_workflows returned without storing a new version: the
    # latest version already had this source and metadata (registering is idempotent).
    unchanged: bool = field(default=False, compare=False)

    @property
    def ref(self) -> WorkflowRef:
        """What an execution of this version names: the workflow, its code and entrypoint."""
        return WorkflowRef(self.name, self.version, self.source_hash, self.entrypoint)

    def same_definition(self, other: WorkflowRecord) -> bool:
        """Same source and metadata (every field but the version, the file's name and when)."""
        return replace(self, version=0, filename="", registered_at=0.0) == replace(
            other, version=0, filename="", registered_at=0.0
        )
