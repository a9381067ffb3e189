"""Worker pools and the demand on them: what an autoscaler needs to start workers from zero.

A pool is a named set of workers of one kind. Its *shape* (``PoolSpec``) is
what one worker of it offers: labels, resources, runtime, packages and
capacity, declared by an operator (``flux pool apply``) or learned from a
connected worker of the pool. A worker joins a pool through the reserved
label ``flux/pool`` (``flux start worker --pool``), so affinity can name a
pool too.

- ``spec``: ``PoolSpec``, the ``flux/pool`` label, pool names, learned shapes.
- ``declarations``: reading a pools document (``parse_pools``).
- ``demand``: the workers each pool needs for what is pending (``compute_demand``).
"""

from flux.matching.pools.declarations import MAX_POOLS, parse_pool, parse_pools
from flux.matching.pools.demand import (
    RETRY_SOON,
    PoolDemand,
    compute_demand,
    could_run,
    could_run_text,
    merge_specs,
    pool_of,
)
from flux.matching.pools.spec import (
    DECLARED,
    LEARNED,
    NAME_FORM,
    POOL_LABEL,
    PoolSpec,
    learned,
    validate_pool_name,
)

__all__ = [
    "DECLARED",
    "LEARNED",
    "MAX_POOLS",
    "NAME_FORM",
    "POOL_LABEL",
    "RETRY_SOON",
    "PoolDemand",
    "PoolSpec",
    "compute_demand",
    "could_run",
    "could_run_text",
    "learned",
    "merge_specs",
    "parse_pool",
    "parse_pools",
    "pool_of",
    "validate_pool_name",
]
