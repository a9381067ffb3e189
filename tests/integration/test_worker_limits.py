"""Which limit set a worker's totals, as ``flux workers list`` shows it (table and --json)."""

from __future__ import annotations

import json

import pytest

from flux.testing import Cluster

pytestmark = [pytest.mark.integration]


def test_workers_list_says_which_limit_applied(cluster: Cluster) -> None:
    # A cap below the machine is a limit like a container's: the listing names it.
    cluster.start_worker("capped", "--cpus", "1", "--memory", "1Gi")
    listed = json.loads(cluster.flux("workers", "list", "--json").stdout)
    [worker] = [w for w in listed["workers"] if w["name"] == "capped"]
    limits = {x["resource"]: x for x in worker["resources"]["limits"]}
    assert limits["memory"]["source"] == "--memory" and limits["memory"]["limit"] == 1024**3
    assert limits["memory"]["host"] > 1024**3
    if limits.get("cpu"):  # a one-core machine: a cap of 1 is no limit
        assert limits["cpu"]["source"] == "--cpus" and limits["cpu"]["limit"] == 1
    table = cluster.flux("workers", "list").stdout.splitlines()
    [row] = [line for line in table if line.startswith("capped")]
    assert "memory=--memory" in row[table[0].index("LIMITS") :]
