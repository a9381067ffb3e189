"""Workflow code on the worker: fetched once per content hash, cached on disk and in memory.

Dispatches carry only the source hash; the worker fetches a file it has not
seen, checks the hash, keeps it under its work directory, and imports it once.

The hash comes from the core (or whoever sits on a plaintext path to it), so
it is checked to be exactly 64 lowercase hex digits before it names a file,
and a cached file is hashed again before import: a hash like ``../../x`` or a
file changed on disk never gets imported.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

from flux.domain.execution import WorkflowRef

Fetch = Callable[[str], Awaitable[tuple[str, str]]]

SOURCE_HASH = re.compile(r"[0-9a-f]{64}")


class WorkflowCodeError(Exception):
    """The workflow's code could not be fetched, verified or imported."""


class CodeCache:
    def __init__(self, directory: Path, fetch: Fetch):
        self.directory = directory
        self._fetch = fetch
        self._modules: dict[str, ModuleType] = {}
        self._loading: dict[str, asyncio.Future[ModuleType]] = {}

    async def function(self, ref: WorkflowRef) -> Callable[..., object]:
        if not SOURCE_HASH.fullmatch(ref.source_hash):
            raise WorkflowCodeError(
                f"source_hash must be 64 lowercase hex characters (sha256); got {ref.source_hash[:80]!r}"
            )
        module = self._modules.get(ref.source_hash) or await self._module(ref.source_hash)
        fn = getattr(module, ref.entrypoint, None)
        if not callable(fn):
            raise WorkflowCodeError(
                f"{ref.name} v{ref.version}: the file defines no function {ref.entrypoint!r}"
            )
        return fn

    async def _module(self, source_hash: str) -> ModuleType:
        pending = self._loading.get(source_hash)
        if pending is not None:
            return await asyncio.shield(pending)
        future = self._loading[source_hash] = asyncio.get_running_loop().create_future()
        try:
            module = await self._load(source_hash)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # consumed here; waiters get it through shield
            raise
        else:
            self._modules[source_hash] = module
            future.set_result(module)
            return module
        finally:
            del self._loading[source_hash]

    async def _load(self, source_hash: str) -> ModuleType:
        # One folder per hash holding the file under the name it was registered with, so
        # tracebacks name the user's file (``…/code/<hash>/hello.py``) and still show its lines.
        folder = self.directory / source_hash
        cached = sorted(folder.glob("*.py")) if folder.is_dir() else []
        path = cached[0] if cached else None
        if path is not None and _digest(path.read_bytes()) != source_hash:
            # Changed on disk since we wrote it (or never ours): fetch it again rather than run it.
            path.unlink()
            path = None
        if path is None:
            filename, source = await self._fetch(source_hash)
            if _digest(source.encode()) != source_hash:
                raise WorkflowCodeError(f"workflow source for {source_hash} does not match its hash")
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / _safe_filename(filename)
            # Write then rename, so a crash never leaves a half file that later imports.
            fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(source.encode())
            os.replace(temporary, path)
        # Import from the verified bytes, not the path: the file could change between check and import.
        code = path.read_bytes()
        if _digest(code) != source_hash:
            raise WorkflowCodeError(f"cached workflow file {path} does not match its hash")
        name = f"flux_workflow_{source_hash[:16]}"
        spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
        if spec is None:
            raise WorkflowCodeError(f"cannot import workflow file {path}")
        module = importlib.util.module_from_spec(spec)
        module.__file__ = str(path)
        sys.modules[name] = module  # dataclasses and pickling in user code look themselves up here
        try:
            exec(compile(code, str(path), "exec"), module.__dict__)
        except Exception as exc:
            del sys.modules[name]
            raise WorkflowCodeError(
                f"importing the workflow file failed: {type(exc).__name__}: {exc}"
            ) from exc
        return module


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _safe_filename(filename: str) -> str:
    """The registered file's own name when it is a plain ``*.py`` name, else ``workflow.py``."""
    name = Path(filename).name
    return name if name.endswith(".py") and name.isprintable() and not name.startswith(".") else "workflow.py"
