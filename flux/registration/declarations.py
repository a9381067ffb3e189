"""Read a file's ``@workflow`` declarations from its syntax tree, without running it.

``flux workflow register`` must work on a laptop that lacks the workflow's own imports
(``import torch`` on a machine without torch), so the decorators are read, not executed. In practice every option is a literal: a name, a
``ResourceRequest(...)`` or factory call (``ResourceRequest.with_gpu(2)``)
with literal arguments, a dict of labels, a number. Those are evaluated here
by calling the real ``ResourceRequest`` and the real ``workflow.with_options``,
so a bad value fails exactly as the decorator would, naming the field.

Anything else (a call of the user's own function, an imported constant, a
``**options``) cannot be known without running the file: ``read_declarations``
then raises :class:`NotStatic` naming the value and its line, and the loader
refuses the file (or, when the caller allows it, imports it). A ``workflow``
name the file binds a second time (an import in an ``if`` block, say) is not
trusted to be Flux's. The worker imports the file for real when it runs the
workflow, so nothing is skipped, only moved to where the imports exist.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from flux.domain.gang import Gang
from flux.domain.limits import Concurrency, RateLimit
from flux.domain.policy import Retry
from flux.domain.resource_request import ResourceRequest
from flux.workflow import WorkflowDefinition, definition_of, workflow

# Modules whose ``workflow`` and ``ResourceRequest`` are Flux's own.
_DOMAIN = ("resource_request", "policy", "limits", "gang")
_FLUX_MODULES = frozenset({"flux", "flux.workflow", *(f"flux.domain.{m}" for m in _DOMAIN)})
# Value classes of flux called for real on literal arguments, by the name flux exports them under.
_VALUE_CLASSES: dict[str, Callable[..., Any]] = {
    "Retry": Retry,
    "Concurrency": Concurrency,
    "RateLimit": RateLimit,
    "Gang": Gang,
}
_FACTORIES = frozenset({"with_cpu", "with_memory", "with_gpu", "with_disk", "with_packages"})
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_SHOWN = 60  # characters of a value quoted in a message


class NotStatic(Exception):
    """A value the syntax tree alone cannot give; importing the file is the only way to know it."""

    def __init__(self, line: int, text: str, why: str):
        super().__init__(f"line {line}: {text} {why}")
        self.line = line
        self.text = text
        self.why = why


class SourceError(ValueError):
    """The file is not valid Python: one message with file:line and the offending line."""

    def __init__(self, filename: str, line: int, column: int, message: str, text: str):
        super().__init__(filename, line, column, message, text)
        self.filename, self.line, self.column, self.message, self.text = filename, line, column, message, text

    def __str__(self) -> str:
        where = f"{self.filename}:{self.line}" + (f":{self.column}" if self.column else "")
        shown = self.text.rstrip("\n")
        if not shown.strip():
            return f"{where}: {self.message}"
        indent = len(shown) - len(shown.lstrip())
        caret = " " * max(0, self.column - 1 - indent) + "^" if self.column else ""
        return f"{where}: {self.message}\n    {shown.strip()}" + (f"\n    {caret}" if caret else "")


def parse(source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as exc:
        line = exc.lineno or 0
        text = exc.text or (source.splitlines()[line - 1] if 0 < line <= len(source.splitlines()) else "")
        raise SourceError(filename, line, exc.offset or 0, exc.msg, text) from None
    except ValueError as exc:  # e.g. a NUL byte in the source
        raise SourceError(filename, 0, 0, str(exc), "") from None


def read_declarations(source: str, filename: str) -> list[WorkflowDefinition]:
    """The workflows the file declares at module level, validated as the real decorator validates.

    Raises :class:`SourceError` for invalid Python, :class:`NotStatic` when a value
    needs the file to run, and ``ValueError``/``TypeError`` (prefixed with
    ``filename:line``) for an invalid option.
    """
    tree = parse(source, filename)
    reader = _Reader(tree, source)
    found: dict[str, WorkflowDefinition] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            definition = reader.definition(node, filename)
            if definition is not None:
                found[node.name] = definition  # a later def of the same name replaces it, as at import
            else:
                found.pop(node.name, None)
    reader.check_every_use_was_read()
    return list(found.values())


class _Reader:
    def __init__(self, tree: ast.Module, source: str):
        self.source = source
        self.workflow_names: set[str] = set()  # names bound to flux's `workflow`
        self.request_names: set[str] = set()  # names bound to ResourceRequest
        self.retry_names: set[str] = set()  # names bound to Retry
        self.value_names: dict[str, str] = {}  # local name -> Concurrency or RateLimit
        self.flux_modules: set[str] = set()  # names bound to the flux package (import flux [as f])
        self.constants: dict[str, ast.expr] = {}  # module-level names assigned a value exactly once
        self._read: set[int] = set()  # ids of the nodes naming `workflow` inside decorators we read
        assigned: dict[str, int] = {}
        rebound: dict[str, int] = {}  # as assigned, leaving out `import flux[.module]` statements
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module in _FLUX_MODULES and node.level == 0:
                for alias in node.names:
                    if alias.name == "*":
                        self.workflow_names.add("workflow")
                        self.request_names.add("ResourceRequest")
                        self.retry_names.add("Retry")
                        self.value_names.update(Concurrency="Concurrency", RateLimit="RateLimit", Gang="Gang")
                    elif alias.name in ("Concurrency", "RateLimit", "Gang"):
                        self.value_names[alias.asname or alias.name] = alias.name
                    elif alias.name == "Retry":
                        self.retry_names.add(alias.asname or alias.name)
                    elif alias.name == "workflow":
                        self.workflow_names.add(alias.asname or alias.name)
                    elif alias.name == "ResourceRequest":
                        self.request_names.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "flux" and alias.asname:
                        self.flux_modules.add(alias.asname)
                    elif alias.name.split(".")[0] == "flux" and not alias.asname:
                        self.flux_modules.add("flux")
            targets = _targets(node)
            for target in targets:
                assigned[target] = assigned.get(target, 0) + 1
            if not (isinstance(node, ast.Import) and all(a.name.split(".")[0] == "flux" for a in node.names)):
                for target in targets:
                    rebound[target] = rebound.get(target, 0) + 1
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                self.constants[node.target.id] = node.value
        # Only names bound once at module level are constants; a rebound one needs the file to run.
        self.constants = {k: v for k, v in self.constants.items() if assigned.get(k) == 1}
        # A flux name the file binds again (anywhere at module level, in an `if` or `try` block too, or
        # through a star import from another module) is no longer surely flux's.
        if "*" in assigned:
            self.workflow_names, self.request_names, self.flux_modules = set(), set(), set()
            self.retry_names = set()
            self.value_names = {}
        self.value_names = {k: v for k, v in self.value_names.items() if assigned.get(k, 0) <= 1}
        self.workflow_names = {n for n in self.workflow_names if assigned.get(n, 0) <= 1}
        self.request_names = {n for n in self.request_names if assigned.get(n, 0) <= 1}
        self.retry_names = {n for n in self.retry_names if assigned.get(n, 0) <= 1}
        self.flux_modules = {n for n in self.flux_modules if rebound.get(n, 0) == 0}
        self.tree = tree

    # ---- what names mean

    def _is_flux_attribute(self, node: ast.expr, attribute: str) -> bool:
        """``flux.workflow`` or ``flux.ResourceRequest`` through an ``import flux``."""
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attribute
            and isinstance(node.value, ast.Name)
            and node.value.id in self.flux_modules
        )

    def is_workflow(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.workflow_names
        return self._is_flux_attribute(node, "workflow")

    def is_request_class(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.request_names
        return self._is_flux_attribute(node, "ResourceRequest")

    def is_retry_class(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.retry_names
        return self._is_flux_attribute(node, "Retry")

    def value_class(self, node: ast.expr) -> Callable[..., Any] | None:
        """``Concurrency`` or ``RateLimit`` (by the name the file imported, or ``flux.X``), else None."""
        if isinstance(node, ast.Name) and node.id in self.value_names:
            return _VALUE_CLASSES[self.value_names[node.id]]
        for name in ("Concurrency", "RateLimit", "Gang"):
            if self._is_flux_attribute(node, name):
                return _VALUE_CLASSES[name]
        return None

    # ---- decorators

    def definition(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, filename: str
    ) -> WorkflowDefinition | None:
        ours = [d for d in node.decorator_list if self._names_workflow(d)]
        if not ours:
            return None
        if len(ours) > 1:
            raise NotStatic(node.lineno, f"{node.name}", "has more than one @workflow decorator")
        decorator = ours[0]
        if self.is_workflow(decorator):
            self._read.add(id(decorator))
        elif (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "with_options"
            and self.is_workflow(decorator.func.value)
        ):
            self._read.add(id(decorator.func.value))
        else:
            raise NotStatic(
                decorator.lineno, f"@{self._text(decorator)}", "is not a form of @workflow Flux reads"
            )
        stub = _stub(node.name, isinstance(node, ast.AsyncFunctionDef))
        try:
            args, kwargs = self._arguments(decorator) if isinstance(decorator, ast.Call) else ([], {})
            decorate = workflow.with_options(*args, **kwargs)
            decorate(stub)
        except (TypeError, ValueError) as exc:
            # A ResourceRequest that refused a value points at that value's line.
            line = getattr(exc, "flux_line", decorator.lineno)
            raise type(exc)(f"{filename}:{line}: {_public(exc)}") from None
        found = definition_of(stub)
        assert found is not None
        return found

    def _names_workflow(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "with_options":
            target = target.value
        return self.is_workflow(target)

    def _arguments(self, call: ast.Call) -> tuple[list[Any], dict[str, Any]]:
        args = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                raise NotStatic(arg.lineno, self._text(arg), "unpacks arguments")
            args.append(self.value(arg))
        kwargs = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise NotStatic(keyword.value.lineno, f"**{self._text(keyword.value)}", "unpacks options")
            whole = self._text(keyword.value)
            try:
                kwargs[keyword.arg] = self.value(keyword.value)
            except NotStatic as exc:
                why = exc.why if exc.text == whole else f"holds {exc.text}, which {exc.why}"
                raise NotStatic(exc.line, f"{keyword.arg}={whole}", why) from None
            except (TypeError, ValueError) as exc:
                exc.flux_line = keyword.value.lineno  # type: ignore[attr-defined]
                raise
        return args, kwargs

    def check_every_use_was_read(self) -> None:
        """``workflow`` used anywhere but a decorator we read (``w = workflow(fn)``) needs the file run."""
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Name | ast.Attribute)
                and self.is_workflow(node)
                and id(node) not in self._read
            ):
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    continue
                raise NotStatic(node.lineno, self._text(node), "is used outside a decorator")

    # ---- values

    def value(self, node: ast.expr, depth: int = 0) -> Any:
        if depth > 32:
            raise NotStatic(node.lineno, self._text(node), "is nested too deeply to read")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.value(node.operand, depth + 1)
            if isinstance(operand, int | float) and not isinstance(operand, bool):
                return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = self.value(node.left, depth + 1), self.value(node.right, depth + 1)
            if _small_ints(left, right) and not (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
                return _ARITHMETIC[type(node.op)](left, right)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self.value(item, depth + 1) for item in node.elts if not isinstance(item, ast.Starred)]
            if len(items) == len(node.elts):
                return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {
                self.value(k, depth + 1): self.value(v, depth + 1)
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None
            }
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.value(self.constants[node.id], depth + 1)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise NotStatic(node.lineno, self._text(node), "is not a literal")

    def _call(self, node: ast.Call, depth: int) -> Any:
        """``ResourceRequest(...)`` and its factories, and ``Retry(...)``, called for real on literal
        arguments (so a bad value fails exactly as at import, naming the field)."""
        func = node.func
        target: Callable[..., Any] | None = None
        if self.is_request_class(func):
            target = ResourceRequest
        elif self.is_retry_class(func):
            target = Retry
        elif self.value_class(func) is not None:
            target = self.value_class(func)
        elif isinstance(func, ast.Attribute) and func.attr in _FACTORIES:
            owner = (
                ResourceRequest if self.is_request_class(func.value) else self.value(func.value, depth + 1)
            )
            if isinstance(owner, ResourceRequest) or owner is ResourceRequest:
                target = getattr(owner, func.attr)
        if target is None or any(isinstance(a, ast.Starred) for a in node.args):
            raise NotStatic(node.lineno, self._text(node), "is not a literal")
        if any(k.arg is None for k in node.keywords):
            raise NotStatic(node.lineno, self._text(node), "unpacks arguments")
        args = [self.value(a, depth + 1) for a in node.args]
        kwargs = {k.arg: self.value(k.value, depth + 1) for k in node.keywords if k.arg is not None}
        return target(*args, **kwargs)

    def _text(self, node: ast.AST) -> str:
        text = ast.get_source_segment(self.source, node) or ast.unparse(node)
        text = " ".join(text.split())
        return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _targets(node: ast.stmt) -> list[str]:
    """Module-level names a statement binds: assignments, defs, imports, loops, with, ``except … as``,
    also inside ``if``/``try``/``with``/loop blocks, and ``global`` names bound inside functions.
    ``*`` stands for a star import from a module that is not flux's: it may bind any name."""
    names: list[str] = []
    pending: list[ast.AST] = [node]
    while pending:
        child = pending.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(child.name)
            # Its body binds locals, except the names it declares global.
            names.extend(n for g in ast.walk(child) if isinstance(g, ast.Global) for n in g.names)
            pending.extend(child.decorator_list)
            continue
        if isinstance(child, ast.Lambda):
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            for alias in child.names:
                if alias.name != "*":
                    names.append((alias.asname or alias.name).split(".")[0])
                elif not (isinstance(child, ast.ImportFrom) and child.module in _FLUX_MODULES):
                    names.append("*")
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.append(child.id)
        elif isinstance(child, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and child.name:
            names.append(child.name)
        elif isinstance(child, ast.MatchMapping) and child.rest:
            names.append(child.rest)
        pending.extend(ast.iter_child_nodes(child))
    return names


def _small_ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**80 for v in values)


def _stub(name: str, is_async: bool) -> Callable[..., Any]:
    """A function with the declared name and kind, for the real decorator to inspect."""
    if is_async:

        async def declared(ctx: Any) -> Any:
            return None
    else:

        def declared(ctx: Any) -> Any:
            return None

    declared.__name__ = declared.__qualname__ = name
    return declared


def _public(exc: BaseException) -> str:
    """The message of an error from calling with_options, without Python's internal qualified name."""
    return str(exc).replace("_WorkflowDecorator.with_options()", "workflow.with_options()")
