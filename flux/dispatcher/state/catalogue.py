"""The workflow catalogue: every registered version this server knows, and its placement shape."""

from __future__ import annotations

from flux.dispatcher.state.validation import did_you_mean
from flux.domain.execution import Execution
from flux.domain.gang import Gang
from flux.domain.tenant import DEFAULT_TENANT
from flux.domain.workflow import WorkflowRecord
from flux.errors import InvalidArgument, NotFound
from flux.matching import Shape


class Catalogue:
    def __init__(self) -> None:
        self._records: dict[tuple[str, int], WorkflowRecord] = {}
        self._shapes: dict[tuple[str, int], Shape] = {}
        # Each tenant's shapes (one lane per tenant and requirement); the default tenant's are _shapes.
        self._tenant_shapes: dict[tuple[str, int, str], Shape] = {}
        self._gang_shapes: dict[tuple[str, int, str, int], Shape] = {}
        self._latest: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._records)

    def learn(self, record: WorkflowRecord) -> None:
        key = (record.name, record.version)
        self._records[key] = record
        self._shapes[key] = Shape(
            record.requests, record.affinity, record.runtime, placement=record.placement
        )
        self._latest[record.name] = max(self._latest.get(record.name, 0), record.version)

    def knows(self, name: str, version: int) -> bool:
        """Whether ``name`` is known at ``version`` (0: at any version)."""
        latest = self._latest.get(name)
        return latest is not None and (version == 0 or (name, version) in self._records)

    def names(self) -> list[str]:
        return list(self._latest)

    def get(self, name: str, version: int) -> WorkflowRecord | None:
        return self._records.get((name, version))

    def resolve(self, name: str, version: int, tenant: str | None = None) -> WorkflowRecord:
        """The record a submission names (version 0: the latest), or the error that says why not.

        ``tenant``: the submitter's, who may run its own workflows and ``default``'s (None: any,
        an admin's call); another tenant's workflow answers as one that does not exist.
        """
        latest = self._latest.get(name)
        if latest is None or (tenant is not None and not self.runs(self._records[(name, latest)], tenant)):
            names = (
                self._latest
                if tenant is None
                else [n for n, v in self._latest.items() if self.runs(self._records[(n, v)], tenant)]
            )
            raise NotFound(
                f"workflow {name!r} is not registered{did_you_mean(name, names)}; register its file with 'flux workflow register FILE'"
            )
        if version < 0:
            raise InvalidArgument(f"version must be >= 0 (0 means latest); got {version}")
        record = self._records.get((name, version or latest))
        if record is None:
            raise NotFound(f"workflow {name!r} has no version {version}; the latest is {latest}")
        return record

    @staticmethod
    def runs(record: WorkflowRecord, tenant: str) -> bool:
        """Whether ``tenant`` may run and see ``record``: its own, or ``default``'s (shared)."""
        return record.tenant in (DEFAULT_TENANT, tenant)

    def _gang_shape(self, execution: Execution, key: tuple[str, int]) -> Shape:
        """A gang's shape: its workflow's topology at the run's size (``client.run(gang_size=)``)."""
        assert execution.gang is not None
        size = execution.gang.size
        shape = self._gang_shapes.get((*key, execution.tenant, size))
        if shape is None:
            base = self._shapes[key]
            declared = self._records[key].gang
            gang = declared.with_size(size) if declared is not None else Gang(size)
            shape = Shape(
                base.requests, dict(base.affinity), base.runtime, execution.tenant, base.placement, gang
            )
            self._gang_shapes[(*key, execution.tenant, size)] = shape
        return shape

    def record_of(self, execution: Execution) -> WorkflowRecord:
        return self._records[(execution.workflow.name, execution.workflow.version)]

    def shape_of(self, execution: Execution) -> Shape:
        key = (execution.workflow.name, execution.workflow.version)
        if execution.gang is not None:
            return self._gang_shape(execution, key)
        if execution.tenant == DEFAULT_TENANT:
            return self._shapes[key]
        shape = self._tenant_shapes.get((*key, execution.tenant))
        if shape is None:
            base = self._shapes[key]
            shape = base.for_tenant(execution.tenant)
            self._tenant_shapes[(*key, execution.tenant)] = shape
        return shape
