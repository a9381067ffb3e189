"""Load a workflow file the way ``flux workflow register`` does: collect its workflows.

The decorators are read from the file's syntax tree (``flux.registration.declarations``),
so registering never runs the file's code: a file that starts with
``import torch`` registers from a machine without torch, and a file from
someone else cannot run anything on the machine that registers it. A value
that cannot be read that way is an error naming ``file:line`` and the
argument; only with ``allow_import=True`` (``--allow-import``) is the file
imported instead, and ``notes`` then says which value made it so. Either way
the options go through the real decorator, so an invalid ``ResourceRequest``
fails here, on the user's machine, and nothing is registered.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

from flux.registration.declarations import NotStatic, read_declarations
from flux.workflow import WorkflowDefinition, definition_of


@dataclass(frozen=True, slots=True)
class WorkflowFile:
    path: Path
    source: str
    workflows: list[WorkflowDefinition]
    # One line per reason the file had to be imported (empty when read without running it).
    notes: tuple[str, ...] = field(default=())


class NeedsImport(ValueError):
    """The file's workflows cannot be read without running it, and importing was not allowed."""


ALLOW_IMPORT_HINT = (
    "registering reads the file without running it; write the value as a literal or a module-level "
    "constant, or pass --allow-import (allow_import=True) to import the file and run its code"
)


def load_workflow_file(path: str | Path, allow_import: bool = False) -> WorkflowFile:
    """The workflows of ``path``, read from its syntax tree; imported only with ``allow_import``."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read workflow file {str(path)!r}: {exc}") from None
    try:
        workflows = read_declarations(source, str(path))
    except NotStatic as exc:
        if not allow_import:
            raise NeedsImport(f"{path}:{exc.line}: {exc.text} {exc.why}; {ALLOW_IMPORT_HINT}") from None
        note = f"note: {path}:{exc.line}: {exc.text} {exc.why}; importing the file to read it"
        return WorkflowFile(path, source, _import(path, source, note), (note,))
    if not workflows:
        # Perhaps `workflow` comes through a module of the user's: only running the file can tell.
        if not allow_import:
            raise NeedsImport(
                f"{path}: no @workflow decorator from flux found by reading (import workflow from flux at "
                f"the top of the file); {ALLOW_IMPORT_HINT}"
            )
        note = f"note: {path}: no @workflow decorator from flux found by reading; importing the file"
        return WorkflowFile(path, source, _import(path, source, note), (note,))
    return WorkflowFile(path, source, workflows)


def _import(path: Path, source: str, why: str) -> list[WorkflowDefinition]:
    name = f"flux_register_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{str(path)!r} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (ValueError, TypeError):
        raise  # an invalid declaration: its message names the field
    except Exception as exc:
        raise ValueError(
            f"importing {path} failed: {type(exc).__name__}: {exc}\n({why.removeprefix('note: ')})"
        ) from None
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
    return workflows
