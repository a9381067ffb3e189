"""Workflows registered: each the next version of its name, and its source kept by hash."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.domain.tenant import DEFAULT_TENANT
from flux.domain.workflow import WorkflowRecord
from flux.errors import NotFound

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


async def register(
    d: Handle, filename: str, source: str, workflows: list[WorkflowRecord], tenant: str = DEFAULT_TENANT
) -> list[WorkflowRecord]:
    """Store each workflow as the next version of its name, owned by ``tenant`` (whose admin
    registers it; a name another tenant owns is refused)."""
    validation.check_workflow_file(filename, source, workflows)
    workflows = [dataclasses.replace(w, tenant=tenant) for w in workflows]
    source_hash = hashlib.sha256(source.encode()).hexdigest()
    stored = await d.store.register_workflows(filename, source, source_hash, workflows)
    for record in stored:
        d.catalogue.learn(record)
    return stored


async def source(d: Handle, source_hash: str) -> tuple[str, str]:
    validation.check_source_hash(source_hash)
    found = await d.store.get_source(source_hash)
    if found is None:
        raise NotFound(f"no workflow source with hash {source_hash}")
    return found
