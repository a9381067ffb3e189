"""The state transitions, each a function of the ``Handle`` it changes:

- ``bulk``: many submissions in one commit;
- ``worker_calls``: claim, complete (single and batched), release;
- ``housekeeping``: requeue, lose a worker, forget one, expire dispatches and graces (the tick);
- ``reclaim``: preemption's shell around the pure planner (stop victims, hand back their room).
"""

__all__ = ["bulk", "housekeeping", "reclaim", "worker_calls"]
