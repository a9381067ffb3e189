"""The probe inside a real cgroup: a child process joins a cgroup made here with a one-CPU quota
and a memory limit, and the resources it advertises are those limits (the path resolution over
fake trees is tests/unit/test_cgroup.py). Needs root and writable cpu and memory controllers;
skipped elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROBE = """
import json
from flux.worker.cgroup import CgroupReader
from flux.worker.probe import ResourceProbe
limits = CgroupReader().read()
sample = ResourceProbe(gpu_readers=[]).sample()
print(json.dumps({
    "cpu": limits.cpu_quota and limits.cpu_quota.amount,
    "memory": limits.memory and limits.memory.amount,
    "cpu_total": sample.cpu_total,
    "memory_total": sample.memory_total,
    "limits": [[x.resource, x.source] for x in sample.limits],
}))
"""


def _writable_cgroup() -> tuple[str, list[Path]] | str:
    """(version, directories to create) where this machine lets a test make a cgroup, else why not."""
    if sys.platform != "linux":
        return "cgroups are Linux only"
    if os.geteuid() != 0:
        return "creating a cgroup needs root"
    base = Path("/sys/fs/cgroup")
    name = f"flux-test-{uuid.uuid4().hex[:8]}"
    controllers = base / "cgroup.controllers"
    if controllers.exists():
        have = set(controllers.read_text().split())
        enabled = set((base / "cgroup.subtree_control").read_text().split())
        if {"cpu", "memory"} <= have & enabled and os.access(base, os.W_OK):
            return "v2", [base / name]
        return "cgroup v2 without cpu and memory enabled for children at /sys/fs/cgroup"
    cpu, memory = base / "cpu", base / "memory"
    present = (cpu / "cpu.cfs_quota_us").exists() and (memory / "memory.limit_in_bytes").exists()
    if present and os.access(cpu, os.W_OK) and os.access(memory, os.W_OK):
        return "v1", [cpu / name, memory / name]
    return "no writable cpu and memory cgroup controllers under /sys/fs/cgroup"


def test_probe_inside_a_real_cgroup_advertises_its_limits() -> None:
    found = _writable_cgroup()
    if isinstance(found, str):
        pytest.skip(found)
    if (os.cpu_count() or 1) < 2:
        pytest.skip("a one-core host: a one-CPU quota would not be smaller than the host")
    version, directories = found
    limit = 512 * 1024**2
    try:
        for directory in directories:
            directory.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup here: {exc}")
    try:
        if version == "v2":
            (directories[0] / "cpu.max").write_text("100000 100000")
            (directories[0] / "memory.max").write_text(str(limit))
            procs = [directories[0] / "cgroup.procs"]
            sources = ["cgroup cpu.max", "cgroup memory.max"]
        else:
            (directories[0] / "cpu.cfs_period_us").write_text("100000")
            (directories[0] / "cpu.cfs_quota_us").write_text("100000")
            (directories[1] / "memory.limit_in_bytes").write_text(str(limit))
            procs = [d / "cgroup.procs" for d in directories]
            sources = ["cgroup cpu.cfs_quota_us", "cgroup memory.limit_in_bytes"]
        # The child joins the cgroup before it runs the probe (it reads its own /proc/self/cgroup).
        enter = "".join(f"open({str(p)!r}, 'w').write(str(__import__('os').getpid()));" for p in procs)
        out = subprocess.run(
            [sys.executable, "-c", enter + PROBE], capture_output=True, text=True, timeout=60, check=True
        )
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["cpu"] == 1 and seen["memory"] == limit
        assert seen["cpu_total"] == 1 and seen["memory_total"] == limit
        assert seen["limits"] == [["cpu", sources[0]], ["memory", sources[1]]]
    finally:
        for directory in directories:
            with contextlib.suppress(OSError):
                directory.rmdir()  # the child has exited, so the cgroup is empty
