"""Load a workflow file the way ``flux workflow register`` does: import it, collect its workflows.

Importing runs the user's declarations, so an invalid ``ResourceRequest``
raises here, on the user's machine, and nothing is registered.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from flux.workflow import WorkflowDefinition, definition_of


@dataclass(frozen=True, slots=True)
class WorkflowFile:
    path: Path
    source: str
    workflows: list[WorkflowDefinition]


def load_workflow_file(path: str | Path) -> WorkflowFile:
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read workflow file {str(path)!r}: {exc}") from None
    name = f"flux_register_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{str(path)!r} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    workflows = []
    for value in vars(module).values():
        definition = definition_of(value)
        # Only workflows defined in this file: the worker imports this file alone.
        if definition is not None and getattr(value, "__module__", None) == name:
            workflows.append(definition)
    if not workflows:
        raise ValueError(f"{str(path)!r} defines no @workflow functions")
    return WorkflowFile(path, source, workflows)
