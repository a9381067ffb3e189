"""The state transitions, each a function of the ``Handle`` it changes:

- ``submission``: one submission or many in one commit; ``workflows``: registration;
- ``cancel``: a client's cancel, another replica's final state, a stale row;
- ``terms``: tenants' quotas and fair share applied;
- ``worker_calls``: claim, complete (single and batched), release;
- ``housekeeping``: requeue, lose a worker, forget one, expire dispatches and graces (the tick);
- ``reclaim``: preemption's shell around the pure planner (stop victims, hand back their room).
"""

__all__ = ["cancel", "housekeeping", "reclaim", "submission", "terms", "worker_calls", "workflows"]
