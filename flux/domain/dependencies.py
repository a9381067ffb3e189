"""Dependencies between executions: the pure rules (DESIGN §10).

An execution may wait for others (``after``) to end in a given way (``when``):

- ``succeeded``: each dependency COMPLETED (the default);
- ``failed``: each dependency FAILED or CANCELLED;
- ``finished``: each dependency ended, however.

``verdict`` says, for one dependency's state, whether it satisfies ``when`` (True), can no longer
satisfy it (False), or has not ended yet (None). A dependent whose ``when`` can no longer hold
ends CANCELLED with reason ``dependency`` and a message naming the dependency (``broken``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from flux.domain.execution import ExecutionError, State
from flux.errors import InvalidArgument

SUCCEEDED, FAILED, FINISHED = "succeeded", "failed", "finished"
WHENS = (SUCCEEDED, FAILED, FINISHED)
# The reason a dependent ends CANCELLED with when a dependency ended the wrong way.
DEPENDENCY = "dependency"
# The most dependencies one execution may name: its ctx.upstream and its row stay small.
MAX_AFTER = 100


def checked_when(when: str | None, field: str = "when") -> str:
    """``when`` as stored: one of WHENS ("" or None means succeeded)."""
    if not when:
        return SUCCEEDED
    if when not in WHENS:
        raise InvalidArgument(f"{field} must be one of {', '.join(WHENS)}, not {when!r}")
    return when


def checked_after(after: Iterable[str], field: str = "after") -> tuple[str, ...]:
    """Dependency ids, each named once, in the order given; refused naming the bad item."""
    ids: dict[str, None] = {}
    for index, execution_id in enumerate(after):
        if not isinstance(execution_id, str) or not execution_id.strip():
            raise InvalidArgument(f"{field}[{index}] must be an execution id, not {execution_id!r}")
        ids[execution_id.strip()] = None
    if len(ids) > MAX_AFTER:
        raise InvalidArgument(f"{field} names {len(ids)} executions; at most {MAX_AFTER} are allowed")
    return tuple(ids)


def verdict(when: str, state: State) -> bool | None:
    """Whether a dependency in ``state`` satisfies ``when``: True, False (never will), None (not ended)."""
    if not state.finished:
        return None
    if when == FINISHED:
        return True
    if when == FAILED:
        return state is not State.COMPLETED
    return state is State.COMPLETED


def broken(dependency_id: str, state: State) -> ExecutionError:
    """The error a dependent carries when ``dependency_id`` ended as ``state`` against its ``when``."""
    return ExecutionError("DependencyFailed", f"dependency {dependency_id} {state.label.lower()}")


def waiting_summary(after: Sequence[str], states: Mapping[str, State | None], when: str) -> str:
    """``waiting for 2 of 3 dependencies: e1 RUNNING, e2 CREATED`` (explain's line); a state of None
    is a dependency this server cannot see now."""
    open_ = [e for e in after if states.get(e) is None or verdict(when, states[e]) is not True]
    named = ", ".join(f"{e} {states[e].label if states.get(e) else 'UNKNOWN'}" for e in open_)
    noun = "dependency" if len(after) == 1 else "dependencies"
    return f"waiting for {len(open_)} of {len(after)} {noun}: {named}"


def find_cycle(edges: Sequence[Sequence[int]]) -> int | None:
    """The index of an item on a cycle of ``edges`` (item -> the items it waits for), else None.
    Iterative (a 10,000-item chain must not overflow the stack); O(items + edges)."""
    color = [0] * len(edges)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(edges)):
        if color[start]:
            continue
        stack = [(start, iter(edges[start]))]
        color[start] = 1
        while stack:
            node, children = stack[-1]
            for child in children:
                if color[child] == 1:
                    return child
                if color[child] == 0:
                    color[child] = 1
                    stack.append((child, iter(edges[child])))
                    break
            else:
                color[node] = 2
                stack.pop()
    return None
