"""Execution and workflow rows as both stores write and read them (SQLite and PostgreSQL share the layout)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.store.base import WorkflowRecord


def requests_to_json(requests: ResourceRequest) -> str:
    return json.dumps(
        {
            "cpu": requests.cpu,
            "memory": requests.memory,
            "gpu": requests.gpu,
            "disk": requests.disk,
            "packages": list(requests.packages),
        }
    )


def requests_from_json(text: str) -> ResourceRequest:
    return ResourceRequest(**json.loads(text))


def execution_row(e: Execution) -> tuple[object, ...]:
    error = json.dumps([e.error.type, e.error.message, e.error.traceback]) if e.error else None
    return (
        e.execution_id, e.seq, e.workflow.name, e.workflow.version, e.workflow.source_hash,
        e.workflow.entrypoint, int(e.state), e.worker, e.attempt, e.generation, e.max_attempts,
        e.input_json, e.output_json, error, json.dumps(list(e.gpu_indices)), e.created_at, e.updated_at,
    )  # fmt: skip


def execution_from_row(row: Mapping[str, Any]) -> Execution:
    error = ExecutionError(*json.loads(row["error"])) if row["error"] else None
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
    )


def workflow_from_row(row: Mapping[str, Any]) -> WorkflowRecord:
    return WorkflowRecord(
        name=row["name"],
        version=row["version"],
        source_hash=row["source_hash"],
        entrypoint=row["entrypoint"],
        requests=requests_from_json(row["requests"]),
        affinity=MappingProxyType(json.loads(row["affinity"])),
        max_attempts=row["max_attempts"],
    )


def workflow_row(record: WorkflowRecord, created_at: float) -> tuple[object, ...]:
    return (
        record.name, record.version, record.source_hash, record.entrypoint, requests_to_json(record.requests),
        json.dumps(dict(record.affinity)), record.max_attempts, created_at,
    )  # fmt: skip
