"""Finding and reading the process's cgroups: fake trees under a root directory (a real cgroup,
made for a child process, is tests/integration/test_cgroup.py).

Each fake tree holds ``proc/self/cgroup``, ``proc/self/mountinfo`` and the
cgroup files, laid out as the kernel lays them out, so the path resolution
(mount root, nesting, v1 controller mounts) is exercised, not only the
arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.worker.cgroup import CgroupLimits, CgroupReader, Limit, parse_cpu_list

GiB = 1024**3
V1_UNLIMITED = "9223372036854771712"

V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "32 23 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "33 23 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
)


def tree(root: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> CgroupReader:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text("22 1 259:1 / / rw,relatime - ext4 /dev/root rw\n" + mountinfo)
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    return CgroupReader(root)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({}, CgroupLimits(), id="no limit files: nothing limited"),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "max 100000"}, CgroupLimits(), id="cpu.max max is no quota"
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "200000 100000"},
            CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max")),
            id="2 CPUs of quota",
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "150000 100000"},
            CgroupLimits(cpu_quota=Limit(1, "cgroup cpu.max")),
            id="1.5 CPUs round down",
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "50000 100000"},
            CgroupLimits(cpu_quota=Limit(1, "cgroup cpu.max")),
            id="half a CPU still offers one",
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "max 100000", "sys/fs/cgroup/pod/cpu.max": "300000 100000"},
            CgroupLimits(cpu_quota=Limit(3, "cgroup cpu.max")),
            id="the parent's quota binds the child",
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpu.max": "400000 100000", "sys/fs/cgroup/pod/cpu.max": "200000 100000"},
            CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max")),
            id="the tightest level wins",
        ),
        pytest.param(
            {"sys/fs/cgroup/pod/c1/cpuset.cpus.effective": "0-1,4"},
            CgroupLimits(cpuset=Limit(3, "cgroup cpuset.cpus.effective")),
            id="cpuset of 3",
        ),
        pytest.param(
            {
                "sys/fs/cgroup/pod/c1/memory.max": str(4 * GiB),
                "sys/fs/cgroup/pod/c1/memory.current": str(GiB),
            },
            CgroupLimits(memory=Limit(4 * GiB, "cgroup memory.max"), memory_free=3 * GiB),
            id="4Gi limit, 1Gi used",
        ),
        pytest.param(
            {
                "sys/fs/cgroup/pod/c1/memory.max": str(4 * GiB),
                "sys/fs/cgroup/pod/c1/memory.current": str(3 * GiB),
                "sys/fs/cgroup/pod/c1/memory.stat": f"anon {GiB}\ninactive_file {2 * GiB}\nactive_file 0",
            },
            CgroupLimits(memory=Limit(4 * GiB, "cgroup memory.max"), memory_free=3 * GiB),
            id="inactive page cache counts as free",
        ),
        pytest.param(
            {
                "sys/fs/cgroup/pod/c1/memory.max": "max",
                "sys/fs/cgroup/pod/memory.max": str(2 * GiB),
                "sys/fs/cgroup/pod/memory.current": str(2 * GiB + 5),
            },
            CgroupLimits(memory=Limit(2 * GiB, "cgroup memory.max"), memory_free=0),
            id="parent limit over its usage: nothing free",
        ),
        pytest.param(
            {
                "sys/fs/cgroup/pod/c1/memory.max": str(3 * GiB),
                "sys/fs/cgroup/pod/c1/memory.current": str(GiB),
                "sys/fs/cgroup/pod/memory.max": str(4 * GiB),
                "sys/fs/cgroup/pod/memory.current": str(3 * GiB),
            },
            CgroupLimits(memory=Limit(3 * GiB, "cgroup memory.max"), memory_free=GiB),
            id="a sibling's use of the parent's limit leaves less free than the child's own",
        ),
        pytest.param(
            {"sys/fs/cgroup/cpu.max": "100000 100000", "sys/fs/cgroup/elsewhere/cpu.max": "100000 100000"},
            CgroupLimits(cpu_quota=Limit(1, "cgroup cpu.max")),
            id="only the process's own chain is read",
        ),
    ],
)
def test_v2(tmp_path: Path, files: dict[str, str], expected: CgroupLimits) -> None:
    (tmp_path / "sys/fs/cgroup/pod/c1").mkdir(parents=True)
    reader = tree(tmp_path, "0::/pod/c1\n", V2_MOUNT, files)
    assert reader.read() == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "-1", "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000"},
            CgroupLimits(),
            id="quota -1 is no quota",
        ),
        pytest.param(
            {"cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "200000", "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000"},
            CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.cfs_quota_us")),
            id="cfs quota of 2",
        ),
        pytest.param(
            {"cpuset/docker/c1/cpuset.cpus": "2-3"},
            CgroupLimits(cpuset=Limit(2, "cgroup cpuset.cpus")),
            id="cpuset of 2",
        ),
        pytest.param(
            {"memory/docker/c1/memory.limit_in_bytes": V1_UNLIMITED, "memory/docker/c1/memory.usage_in_bytes": "5"},
            CgroupLimits(),
            id="the huge v1 number is no limit",
        ),
        pytest.param(
            {
                "memory/docker/c1/memory.limit_in_bytes": str(2 * GiB),
                "memory/docker/c1/memory.usage_in_bytes": str(GiB),
                "memory/docker/c1/memory.stat": f"cache {GiB}\ntotal_inactive_file {GiB // 2}",
            },
            CgroupLimits(memory=Limit(2 * GiB, "cgroup memory.limit_in_bytes"), memory_free=GiB + GiB // 2),
            id="v1 memory with page cache",
        ),
    ],
)  # fmt: skip
def test_v1(tmp_path: Path, files: dict[str, str], expected: CgroupLimits) -> None:
    for controller in ("cpu,cpuacct", "cpuset", "memory"):
        (tmp_path / "sys/fs/cgroup" / controller / "docker/c1").mkdir(parents=True)
    cgroup = "4:memory:/docker/c1\n3:cpuset:/docker/c1\n2:cpu,cpuacct:/docker/c1\n0::/\n"
    reader = tree(tmp_path, cgroup, V1_MOUNTS, {f"sys/fs/cgroup/{p}": t for p, t in files.items()})
    assert reader.read() == expected


def test_hybrid_host_reads_v1_where_the_unified_mount_has_no_controllers(tmp_path: Path) -> None:
    # systemd's hybrid layout: cgroup2 at /sys/fs/cgroup/unified without cpu or memory files.
    mounts = V1_MOUNTS + "41 23 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    (tmp_path / "sys/fs/cgroup/unified/session").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/memory/job").mkdir(parents=True)
    reader = tree(tmp_path, "4:memory:/job\n0::/session\n", mounts, {
        "sys/fs/cgroup/memory/job/memory.limit_in_bytes": str(GiB),
        "sys/fs/cgroup/memory/job/memory.usage_in_bytes": "0",
        "sys/fs/cgroup/unified/session/cgroup.procs": "1",
    })  # fmt: skip
    assert reader.read() == CgroupLimits(memory=Limit(GiB, "cgroup memory.limit_in_bytes"), memory_free=GiB)


def test_container_namespace_sees_its_own_cgroup_as_the_mount_root(tmp_path: Path) -> None:
    # Docker with a cgroup namespace: /proc/self/cgroup says "0::/" and the mount shows the
    # container's own cgroup at /sys/fs/cgroup, limits included.
    reader = tree(tmp_path, "0::/\n", V2_MOUNT, {
        "sys/fs/cgroup/cpu.max": "100000 100000",
        "sys/fs/cgroup/memory.max": str(GiB),
        "sys/fs/cgroup/memory.current": "0",
    })  # fmt: skip
    assert reader.read() == CgroupLimits(
        cpu_quota=Limit(1, "cgroup cpu.max"), memory=Limit(GiB, "cgroup memory.max"), memory_free=GiB
    )


def test_mount_of_a_subtree_maps_the_path_below_its_root(tmp_path: Path) -> None:
    # The mount's root field is /kubepods/pod1: the process's /kubepods/pod1/c1 is c1 below the mount.
    mount = "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    (tmp_path / "sys/fs/cgroup/c1").mkdir(parents=True)
    reader = tree(tmp_path, "0::/kubepods/pod1/c1\n", mount, {"sys/fs/cgroup/cpu.max": "200000 100000"})
    assert reader.read() == CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max"))


def test_no_proc_means_no_limits(tmp_path: Path) -> None:
    assert CgroupReader(tmp_path / "nothing-here").read() == CgroupLimits()


@pytest.mark.parametrize(("text", "count"), [("0", 1), ("0-3", 4), ("0-1,4,6-7", 5), ("", 0), ("3,", 1)])
def test_parse_cpu_list(text: str, count: int) -> None:
    assert parse_cpu_list(text) == count


def test_limits_are_reread_but_the_cgroup_is_located_once(tmp_path: Path) -> None:
    (tmp_path / "sys/fs/cgroup/pod").mkdir(parents=True)
    reader = tree(tmp_path, "0::/pod\n", V2_MOUNT, {"sys/fs/cgroup/pod/cpu.max": "200000 100000"})
    assert reader.read().cpu_quota == Limit(2, "cgroup cpu.max")
    (tmp_path / "proc/self/mountinfo").unlink()  # located already: not read again
    (tmp_path / "sys/fs/cgroup/pod/cpu.max").write_text("300000 100000\n")  # raised while running
    assert reader.read().cpu_quota == Limit(3, "cgroup cpu.max")
