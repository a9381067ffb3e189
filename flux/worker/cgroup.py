"""The container's share of the machine: cgroup CPU quota, cpuset and memory limit.

psutil reports the host, so a worker in a 2-CPU, 4 GiB container on a 64-core
host would advertise 64 cores. This module finds the process's cgroups the
way the kernel documents them: the path in ``/proc/self/cgroup``, mapped onto
the cgroup filesystem through the mount listed in ``/proc/self/mountinfo``
(cgroup v2's unified mount, or each v1 controller's own mount), then reads
every level from that cgroup up to the mount's root, because a parent's
limit binds its children and a container often sets it one level up.

v2 files are preferred; v1 ones are the fallback for each resource on its
own (a hybrid host has a unified mount without controllers, as this one may).
Everything is read below ``root``, which is ``/`` on a real machine and a
temporary directory in tests that build fake trees.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

# v1 writes "no limit" as a huge page-aligned number rather than "max".
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit found: the amount (cores or bytes) and the file that set it."""

    amount: int
    source: str


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """What the process's cgroups allow; ``None`` where nothing limits that resource."""

    cpu_quota: Limit | None = None
    cpuset: Limit | None = None
    memory: Limit | None = None
    # Bytes still free under the tightest memory limit: limit - (usage - inactive file cache).
    memory_free: int | None = None


@dataclass(frozen=True, slots=True)
class _Mount:
    root: str  # the cgroup path mounted at ``point`` (not "/" inside some containers)
    point: Path
    controllers: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Chains:
    """The directories to read, leaf first: the v2 cgroup's, and each v1 controller's."""

    v2: list[Path]
    cpu: list[Path]
    cpuset: list[Path]
    memory: list[Path]


class CgroupReader:
    """Reads the limits of the calling process's cgroups below ``root``.

    Where the cgroups are is worked out on the first read and kept: the
    worker samples after every execution, a process does not change cgroup
    under its own feet, and mountinfo can be long. The limit files themselves
    are read every time (a limit can be raised while the worker runs).
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._chains: _Chains | None = None

    def read(self) -> CgroupLimits:
        if self._chains is None:
            try:
                self._chains = self._locate()
            except OSError:
                return CgroupLimits()  # no /proc (not Linux), or not readable: the host's size applies
        chains = self._chains
        cpu_quota = _cpu_max(chains.v2) or _cfs_quota(chains.cpu)
        cpuset = _cpuset(chains.v2, "cpuset.cpus.effective") or _cpuset(chains.cpuset, "cpuset.cpus")
        memory = _memory(chains.v2, "memory.max", "memory.current", "inactive_file") or _memory(
            chains.memory, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
        )
        return CgroupLimits(
            cpu_quota=cpu_quota,
            cpuset=cpuset,
            memory=memory[0] if memory else None,
            memory_free=memory[1] if memory else None,
        )

    def _locate(self) -> _Chains:
        paths = self._paths()
        mounts = self._mounts()

        def v1(controller: str) -> list[Path]:
            return self._chain(paths.get(controller), [m for m in mounts if controller in m.controllers])

        v2 = self._chain(paths.get(""), [m for m in mounts if m.controllers == frozenset({"cgroup2"})])
        return _Chains(v2, v1("cpu"), v1("cpuset"), v1("memory"))

    def _paths(self) -> dict[str, str]:
        """Controller -> cgroup path; ``""`` is the v2 unified hierarchy ("0::/path")."""
        paths: dict[str, str] = {}
        for line in (self.root / "proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            _, controllers, path = parts
            if not controllers:
                paths[""] = path
            for controller in controllers.split(","):
                if controller:
                    paths[controller] = path
        return paths

    def _mounts(self) -> list[_Mount]:
        mounts = []
        for line in (self.root / "proc/self/mountinfo").read_text().splitlines():
            # "36 25 0:31 /docker/abc /sys/fs/cgroup/cpu rw,relatime shared:1 - cgroup cgroup rw,cpu,cpuacct"
            before, sep, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if not sep or len(fields) < 5 or len(tail) < 3:
                continue
            fstype, options = tail[0], tail[2]
            if fstype == "cgroup2":
                controllers = frozenset({"cgroup2"})
            elif fstype == "cgroup":
                controllers = frozenset(options.split(","))
            else:
                continue
            point = self.root / _unescape(fields[4]).lstrip("/")
            mounts.append(_Mount(_unescape(fields[3]), point, controllers))
        return mounts

    def _chain(self, path: str | None, mounts: list[_Mount]) -> list[Path]:
        """The process's cgroup directory and its parents up to the mount's root, leaf first."""
        if path is None:
            return []
        for mount in mounts:
            relative = _relative(path, mount.root)
            if relative is None:
                continue
            leaf = mount.point.joinpath(*relative)
            if not leaf.is_dir():
                continue
            chain = [leaf]
            while chain[-1] != mount.point:
                chain.append(chain[-1].parent)
            return chain
        return []


def _relative(path: str, mount_root: str) -> list[str] | None:
    """``path``'s parts below ``mount_root``; a namespaced "/" path sits at the mount itself."""
    parts = [p for p in path.split("/") if p]
    root = [p for p in mount_root.split("/") if p]
    if parts[: len(root)] == root:
        return parts[len(root) :]
    # Inside a cgroup namespace the kernel shows paths relative to the namespace
    # root, which is what the container's mount shows at its top.
    return [] if not parts or path.startswith("/..") else None


def _unescape(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cores(quota: float, period: float) -> int:
    # Whole cores, rounded down but never below one: 1.5 CPUs of quota cannot run two
    # cpu=1 executions at full speed, and a 0.5-CPU container can still run something.
    return max(1, math.floor(quota / period))


def _cpu_max(chain: list[Path]) -> Limit | None:
    found: list[Limit] = []
    for directory in chain:
        text = _read(directory / "cpu.max")  # "max 100000" or "200000 100000"
        if not text:
            continue
        quota, _, period = text.partition(" ")
        if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
            continue
        found.append(Limit(_cores(int(quota), int(period)), "cgroup cpu.max"))
    return min(found, key=lambda limit: limit.amount, default=None)


def _cfs_quota(chain: list[Path]) -> Limit | None:
    found: list[Limit] = []
    for directory in chain:
        quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        if quota is None or period is None:
            continue
        try:
            q, p = int(quota), int(period)
        except ValueError:
            continue
        if q > 0 and p > 0:  # -1 is "no quota"
            found.append(Limit(_cores(q, p), "cgroup cpu.cfs_quota_us"))
    return min(found, key=lambda limit: limit.amount, default=None)


def parse_cpu_list(text: str) -> int:
    """How many CPUs a kernel list names: ``"0-3,8,10-11"`` -> 7."""
    count = 0
    for item in filter(None, (part.strip() for part in text.split(","))):
        first, _, last = item.partition("-")
        count += (int(last) - int(first) + 1) if last else 1
    return count


def _cpuset(chain: list[Path], name: str) -> Limit | None:
    # The effective set already reflects the parents', so the nearest level that says anything wins.
    for directory in chain:
        text = _read(directory / name)
        if text:
            try:
                return Limit(parse_cpu_list(text), f"cgroup {name}")
            except ValueError:
                return None
    return None


def _stat(path: Path, key: str) -> int:
    text = _read(path) or ""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _memory(
    chain: list[Path], limit_file: str, usage_file: str, inactive_key: str
) -> tuple[Limit, int] | None:
    """(tightest limit, bytes free under it), or None when no level sets a limit.

    Free is taken at every limited level and the smallest wins: a parent's
    limit is shared with its other children. Usage less inactive file cache is
    the working set the kernel cannot simply drop (what the kubelet evicts on).
    """
    limit: Limit | None = None
    free: int | None = None
    for directory in chain:
        text = _read(directory / limit_file)
        if not text or not text.isdigit() or int(text) >= _V1_UNLIMITED:
            continue
        amount = int(text)
        usage_text = _read(directory / usage_file)
        usage = int(usage_text) if usage_text and usage_text.isdigit() else 0
        working_set = max(0, usage - _stat(directory / "memory.stat", inactive_key))
        here = max(0, amount - working_set)
        free = here if free is None else min(free, here)
        if limit is None or amount < limit.amount:
            limit = Limit(amount, f"cgroup {limit_file}")
    return None if limit is None or free is None else (limit, free)


def affinity_count() -> int | None:
    """CPUs this process may run on (``taskset``, a cpuset), or None where the OS cannot say."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
