"""``client.graph()``: a DAG of executions built in Python and submitted in one call.

    g = client.graph()
    a = g.add("extract", {"day": 1})
    b = g.add("transform", after=[a])            # waits for an item of this graph
    c = g.add("report", after=[b, old], when="finished")   # and for an existing execution
    executions = g.submit()                      # all or nothing; in add order

Each ``add`` returns a :class:`Node`; ``after`` takes nodes of the same graph (sent as
``after_index``), execution ids, and the executions ``run`` returned. ``submit`` sends one
``RunWorkflows`` call with ``items``: the server checks the whole graph (an unknown id, a bad
input, a cycle refuse it, naming the item) and stores every execution in one commit. On the
asyncio client, ``await g.submit()``. After ``submit``, each node's ``execution`` is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from flux.domain.dependencies import checked_when
from flux.domain.limits import check_run_key
from flux.errors import InvalidArgument
from flux.v1 import control_pb2

# The most items one graph may hold: one RunWorkflows call (the server's limit).
MAX_ITEMS = 10_000
# One encoder for every input (json.dumps with an argument makes a new one per call).
_ENCODER = json.JSONEncoder(allow_nan=False)


class Node:
    """One execution of a graph, before and after it is submitted."""

    __slots__ = ("execution", "graph", "index", "workflow")

    def __init__(self, graph: Graph, index: int, workflow: str) -> None:
        self.graph = graph
        self.index = index
        self.workflow = workflow
        # The execution as accepted, once the graph is submitted.
        self.execution: control_pb2.Execution | None = None

    @property
    def execution_id(self) -> str:
        if self.execution is None:
            raise InvalidArgument(
                f"node {self.index} ({self.workflow}) has no id until its graph is submitted"
            )
        return self.execution.execution_id

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.workflow!r})"


class Graph:
    def __init__(self, submit: Callable[[control_pb2.RunWorkflowsRequest], Any]) -> None:
        self._submit = submit
        self.nodes: list[Node] = []
        self._request = control_pb2.RunWorkflowsRequest()

    def __len__(self) -> int:
        return len(self.nodes)

    def add(
        self,
        workflow: str,
        input: Any = None,
        *,
        after: Iterable[Node | control_pb2.Execution | str] = (),
        when: str | None = None,
        version: int = 0,
        priority: int | None = None,
        key: str | None = None,
    ) -> Node:
        """One more execution: ``workflow`` with ``input``, waiting for ``after`` to end as ``when``
        asks ("succeeded", the default; "failed"; "finished")."""
        if len(self.nodes) >= MAX_ITEMS:
            raise InvalidArgument(f"a graph holds at most {MAX_ITEMS} executions (one RunWorkflows call)")
        index = len(self.nodes)
        try:
            input_json = _ENCODER.encode(input)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"the input of node {index} cannot be sent as JSON: {exc}") from None
        item = control_pb2.RunItem(workflow_name=workflow, input_json=input_json, version=version)
        for j, dependency in enumerate(after):
            if isinstance(dependency, Node):
                if dependency.graph is not self:
                    raise InvalidArgument(f"after[{j}] of node {index} is a node of another graph")
                item.after_index.append(dependency.index)
            elif isinstance(dependency, control_pb2.Execution):
                item.after.append(dependency.execution_id)
            elif isinstance(dependency, str):
                item.after.append(dependency)
            else:
                raise InvalidArgument(
                    f"after[{j}] of node {index} must be a node, an execution or an id, not {type(dependency).__name__}"
                )
        if item.after or item.after_index:
            item.when = checked_when(when)
        elif when is not None:
            checked_when(when)
        if priority is not None:
            item.priority = priority
        if key is not None:
            item.key = check_run_key(key)
        self._request.items.append(item)
        node = Node(self, index, workflow)
        self.nodes.append(node)
        return node

    def submit(self) -> Any:
        """Send the graph (one call, all or nothing): the executions in add order (a coroutine on
        the asyncio client)."""
        if not self.nodes:
            raise InvalidArgument("the graph is empty: add() at least one execution")
        answer = self._submit(self._request)
        if hasattr(answer, "__await__"):
            return self._settled(answer)
        return self._accepted(answer)

    async def _settled(self, answer: Any) -> list[control_pb2.Execution]:
        return self._accepted(await answer)

    def _accepted(self, response: control_pb2.RunWorkflowsResponse) -> list[control_pb2.Execution]:
        for node, execution in zip(self.nodes, response.executions, strict=True):
            node.execution = execution
        return list(response.executions)
