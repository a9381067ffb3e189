"""Execution and workflow rows as both stores write and read them (SQLite and PostgreSQL share the layout)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.gang import Gang, GangRun
from flux.domain.limits import Flow
from flux.domain.policy import Policy, attempts_from_json, attempts_json
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.errors import FailedPrecondition
from flux.store.base import ExecutionQuery

# Named, so a table created before a column was added (and migrated) takes the same rows.
WORKFLOW_COLUMNS = (
    "name, version, source_hash, entrypoint, requests, affinity, max_attempts, created_at, runtime, priority, "
    "tenant, policy, flow, placement, gang"
)
WORKFLOW_COLUMN_COUNT = WORKFLOW_COLUMNS.count(",") + 1
EXECUTION_COLUMNS = (
    "execution_id, seq, workflow_name, workflow_version, source_hash, entrypoint, state, worker, attempt, "
    "generation, max_attempts, input_json, output_json, error, gpu_indices, created_at, updated_at, priority, "
    "trace, tenant, policy, not_before, reason, attempts, heartbeat, started_at, run_time, flow_keys, batch_id, "
    "after_ids, after_when, waiting, gang"
)
# What a later write of a row may change (both stores' upserts set these, and only these).
EXECUTION_UPDATES = (
    "state, worker, attempt, generation, max_attempts, output_json, error, gpu_indices, updated_at, "
    "not_before, reason, attempts, heartbeat, started_at, run_time, waiting, gang"
)

# Execution states as they appear in SQL, by name: no statement spells a bare number.
CREATED, SCHEDULED, RUNNING = int(State.CREATED), int(State.SCHEDULED), int(State.RUNNING)
FAILED, CANCELLED = int(State.FAILED), int(State.CANCELLED)
# ``state < FINISHED`` is unfinished (COMPLETED, FAILED and CANCELLED are at or above it).
FINISHED = int(State.COMPLETED)


def requests_to_json(requests: ResourceRequest) -> str:
    return json.dumps(
        {
            "cpu": requests.cpu,
            "memory": requests.memory,
            "gpu": requests.gpu,
            "disk": requests.disk,
            "packages": list(requests.packages),
            # Rows written before gpu_memory existed lack the key; reading them gives 0 (not checked).
            "gpu_memory": requests.gpu_memory,
        }
    )


def requests_from_json(text: str) -> ResourceRequest:
    return ResourceRequest(**json.loads(text))


def error_to_json(error: ExecutionError) -> str:
    # The bases after the traceback: rows written before them hold three items, read as no bases.
    return json.dumps([error.type, error.message, error.traceback, list(error.bases)])


def error_from_json(text: str) -> ExecutionError:
    items = json.loads(text)
    return ExecutionError(items[0], items[1], items[2], tuple(items[3]) if len(items) > 3 else ())


def execution_row(e: Execution) -> tuple[object, ...]:
    error = error_to_json(e.error) if e.error else None
    policy = e.policy.to_json() if e.policy is not None else ""
    return (
        e.execution_id, e.seq, e.workflow.name, e.workflow.version, e.workflow.source_hash,
        e.workflow.entrypoint, int(e.state), e.worker, e.attempt, e.generation, e.max_attempts,
        e.input_json, e.output_json, error, json.dumps(list(e.gpu_indices)) if e.gpu_indices else "[]", e.created_at, e.updated_at,
        e.priority, e.trace, e.tenant, policy, e.not_before, e.reason, attempts_json(e.attempts), e.heartbeat,
        e.started_at, e.run_time, _flow_keys_json(e.flow_keys) if e.flow_keys else "", e.batch_id,
        " ".join(e.after), e.when, e.waiting, e.gang.to_json() if e.gang is not None else "",
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _flow_keys_json(flow_keys: tuple[tuple[str, str], ...]) -> str:
    # The members of a batch (and the runs of one key) share their keys: encoded once, not per row.
    return json.dumps(dict(flow_keys))


def execution_from_row(row: Mapping[str, Any]) -> Execution:
    error = error_from_json(row["error"]) if row["error"] else None
    return Execution(
        execution_id=row["execution_id"],
        workflow=WorkflowRef(
            row["workflow_name"], row["workflow_version"], row["source_hash"], row["entrypoint"]
        ),
        seq=row["seq"],
        input_json=row["input_json"],
        max_attempts=row["max_attempts"],
        state=State(row["state"]),
        worker=row["worker"],
        attempt=row["attempt"],
        generation=row["generation"],
        output_json=row["output_json"],
        error=error,
        gpu_indices=tuple(json.loads(row["gpu_indices"])),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        priority=row["priority"],
        trace=row["trace"],
        tenant=row["tenant"],
        policy=Policy.from_json(row["policy"]) if row["policy"] else None,
        not_before=row["not_before"],
        reason=row["reason"],
        attempts=attempts_from_json(row["attempts"]),
        heartbeat=row["heartbeat"],
        started_at=row["started_at"],
        run_time=row["run_time"],
        flow_keys=tuple(sorted(json.loads(row["flow_keys"]).items())) if row["flow_keys"] else (),
        batch_id=row["batch_id"],
        after=tuple(row["after_ids"].split()),
        when=row["after_when"],
        waiting=row["waiting"],
        gang=GangRun.from_json(row["gang"]),
    )


def workflow_from_row(row: Mapping[str, Any]) -> WorkflowRecord:
    """A workflows row; ``filename`` too when the query joined ``sources``."""
    return WorkflowRecord(
        name=row["name"],
        version=row["version"],
        source_hash=row["source_hash"],
        entrypoint=row["entrypoint"],
        requests=requests_from_json(row["requests"]),
        affinity=MappingProxyType(json.loads(row["affinity"])),
        max_attempts=row["max_attempts"],
        filename=row["filename"] if "filename" in row.keys() else "",  # noqa: SIM118 - sqlite3.Row has no `in`
        runtime=row["runtime"],
        registered_at=row["created_at"],
        priority=row["priority"],
        tenant=row["tenant"],
        policy=Policy.from_json(row["policy"]) if row["policy"] else None,
        flow=Flow.from_json(row["flow"]),
        placement=row["placement"],
        gang=Gang.from_json(row["gang"]),
    )


def workflow_row(record: WorkflowRecord, created_at: float) -> tuple[object, ...]:
    return (
        record.name, record.version, record.source_hash, record.entrypoint, requests_to_json(record.requests),
        json.dumps(dict(record.affinity)), record.max_attempts, created_at, record.runtime, record.priority,
        record.tenant, record.policy.to_json() if record.policy is not None else "", record.flow.to_json(),
        record.placement,
        record.gang.to_json() if record.gang is not None else "",
    )  # fmt: skip


def check_owner(latest: WorkflowRecord | None, workflow: WorkflowRecord) -> None:
    """A workflow name belongs to the tenant that registered it first.

    The refusal does not name that tenant: a tenant's admin registering must not learn who
    else uses the fleet (a cluster admin reads the owner with flux workflow show).
    """
    if latest is not None and latest.tenant != workflow.tenant:
        raise FailedPrecondition(
            f"workflow {workflow.name!r} belongs to another tenant; register it under another name"
        )


def next_version(
    latest: WorkflowRecord | None, workflow: WorkflowRecord, source_hash: str, filename: str
) -> WorkflowRecord:
    """What registering ``workflow`` stores after ``latest`` (its newest version, if any): the next
    version, or ``latest`` itself marked ``unchanged`` when the definition is the same."""
    check_owner(latest, workflow)
    version = (latest.version if latest else 0) + 1
    record = replace(workflow, version=version, source_hash=source_hash, filename=filename)
    if latest is not None and latest.same_definition(record):
        return replace(latest, filename=filename, unchanged=True)
    return record


def workflows_query(name: str, mark: str) -> tuple[str, tuple[object, ...]]:
    """Every version (of ``name``, when given) with its file name; ``mark`` is the driver's placeholder."""
    where = f"WHERE w.name = {mark}" if name else ""
    sql = (
        "SELECT w.*, s.filename FROM workflows w LEFT JOIN sources s ON s.source_hash = w.source_hash "
        f"{where} ORDER BY w.name, w.version"
    )
    return sql, ((name,) if name else ())


def executions_filter(query: ExecutionQuery, mark: str) -> tuple[str, list[object]]:
    """The WHERE clause (and its parameters) of a listing, for either driver's ``mark``."""
    changing: list[str] = []  # what the dispatcher may know newer than the row: state and worker
    params: list[object] = []
    if query.states:
        changing.append(f"state IN ({', '.join([mark] * len(query.states))})")
        params.extend(query.states)
    if query.worker:
        changing.append(f"worker = {mark}")
        params.append(query.worker)
    clauses: list[str] = []
    if changing:
        clause = " AND ".join(changing)
        clauses.append(f"(({clause}) OR state < {FINISHED})" if query.unfinished_too else clause)
    if query.tenant:
        clauses.append(f"tenant = {mark}")
        params.append(query.tenant)
    if query.workflow:
        clauses.append(f"workflow_name = {mark}")
        params.append(query.workflow)
    if query.created_after:
        clauses.append(f"created_at >= {mark}")
        params.append(query.created_after)
    if query.after is not None:
        clauses.append(f"(seq < {mark} OR (seq = {mark} AND execution_id < {mark}))")
        params.extend((query.after[0], query.after[0], query.after[1]))
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params
