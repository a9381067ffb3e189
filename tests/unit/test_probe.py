"""The worker resource probe: CPU arithmetic, caps, GPU readers and fallbacks, software, change detection."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

import flux.worker.probe as probe_module
from flux.domain.worker import Gpu, ResourceLimit, WorkerResources
from flux.worker.cgroup import CgroupLimits, Limit
from flux.worker.cpu_usage import WindowedCpu
from flux.worker.gpu import GputilReader, GpuUnavailable, NvmlReader
from flux.worker.probe import (
    Caps,
    ResourceProbe,
    changed_materially,
    read_software,
)

MiB, GiB = 1024**2, 1024**3


@dataclass
class FakePsutil:
    cores: int | None = 4
    percents: list[float] = field(default_factory=lambda: [0.0])
    memory_total: int = 16 * GiB
    memory_available: int = 12 * GiB
    disk_total: int = 100 * GiB
    disk_free: int = 60 * GiB
    intervals: list[float | None] = field(default_factory=list)
    disk_paths: list[str] = field(default_factory=list)

    def cpu_count(self, logical: bool = True) -> int | None:
        assert logical, "the probe must count logical cores"
        return self.cores

    def cpu_percent(self, interval: float | None = None) -> float:
        self.intervals.append(interval)
        # Repeat the last figure once the script runs out.
        return self.percents.pop(0) if len(self.percents) > 1 else self.percents[0]

    def virtual_memory(self) -> Any:
        return SimpleNamespace(total=self.memory_total, available=self.memory_available)

    def disk_usage(self, path: str) -> Any:
        self.disk_paths.append(path)
        if path == "/does/not/exist":
            raise FileNotFoundError(2, "No such file or directory", path)
        return SimpleNamespace(total=self.disk_total, free=self.disk_free)


class FakeReader:
    def __init__(self, gpus: list[Gpu] | None = None, error: str | None = None) -> None:
        self.gpus = gpus or []
        self.error = error
        self.reads = 0

    def read(self) -> list[Gpu]:
        self.reads += 1
        if self.error is not None:
            raise GpuUnavailable(self.error)
        return list(self.gpus)


def gpu(index: int, free: int = 40 * GiB, total: int = 80 * GiB) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index}", name="NVIDIA H100", memory_total=total, memory_free=free)


class PercentCpu:
    """The fake machine's scripted usage figures, as the probe's CPU observer."""

    def __init__(self, fake: FakePsutil) -> None:
        self.fake = fake

    def busy_fraction(self) -> float:
        return self.fake.cpu_percent(None) / 100


class FakeCgroups:
    """What a container's cgroups would say; the default is no container at all."""

    def __init__(self, limits: CgroupLimits | None = None) -> None:
        self.limits = limits or CgroupLimits()

    def read(self) -> CgroupLimits:
        return self.limits


def probe(
    fake: FakePsutil | None = None,
    caps: Caps | None = None,
    readers: list[Any] | None = None,
    *,
    cgroups: CgroupLimits | None = None,
    affinity: int | None = None,
) -> ResourceProbe:
    """A probe on the fake machine: its scripted CPU figures, no container, no affinity mask."""
    fake = fake or FakePsutil()
    return ResourceProbe(
        caps,
        gpu_readers=readers or [],
        psutil_module=fake,
        cpu_observer=PercentCpu(fake),
        cgroups=FakeCgroups(cgroups),  # type: ignore[arg-type]
        affinity=lambda: affinity,
    )


# --- CPU -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "percent", "available"),
    [
        pytest.param(4, 0.0, 4, id="idle 4-core offers 4"),
        pytest.param(4, 50.0, 2, id="50% of 4 offers 2"),
        pytest.param(8, 37.5, 5, id="37.5% of 8 offers 8-3"),
        pytest.param(4, 100.0, 0, id="saturated offers 0"),
        pytest.param(2, 30.0, 1, id="30% of 2 rounds to 1 busy"),
        pytest.param(2, 20.0, 2, id="20% of 2 rounds to 0 busy"),
    ],
)
def test_cpu_available_is_count_minus_rounded_busy(cores: int, percent: float, available: int) -> None:
    sample = probe(FakePsutil(cores=cores, percents=[percent])).sample()
    assert (sample.cpu_total, sample.cpu_available) == (cores, available)


def test_unknown_cpu_count_counts_as_one() -> None:
    assert probe(FakePsutil(cores=None)).sample().cpu_total == 1


# --- memory, disk, caps ----------------------------------------------------------------------------


def test_memory_and_disk_are_reported_as_measured() -> None:
    sample = probe().sample()
    assert (sample.memory_total, sample.memory_available) == (16 * GiB, 12 * GiB)
    assert (sample.disk_total, sample.disk_free) == (100 * GiB, 60 * GiB)


def test_disk_path_picks_the_mount_measured() -> None:
    fake = FakePsutil()
    ResourceProbe(
        disk_path="/srv/work", gpu_readers=[], psutil_module=fake, cpu_observer=PercentCpu(fake)
    ).sample()
    assert set(fake.disk_paths) == {"/srv/work"}
    ResourceProbe(gpu_readers=[], psutil_module=fake)
    assert fake.disk_paths[-1] == "/"


def test_unmeasurable_disk_path_fails_at_start_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--disk-path '/does/not/exist'"):
        ResourceProbe(disk_path="/does/not/exist", gpu_readers=[], psutil_module=FakePsutil())


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        pytest.param(Caps(), {}, id="no caps"),
        pytest.param(
            Caps(cpus=2),
            {"cpu_total": 2, "cpu_available": 2, "limits": (ResourceLimit("cpu", "--cpus", 2, 4),)},
            id="cpus below count",
        ),
        pytest.param(
            Caps(cpus=64),
            {"cpu_total": 64, "cpu_available": 48},
            id="cpus above count sets the total, 25% busy",
        ),
        pytest.param(
            Caps(cpus=0),
            {"cpu_total": 0, "cpu_available": 0, "limits": (ResourceLimit("cpu", "--cpus", 0, 4),)},
            id="cpus zero",
        ),
        pytest.param(
            Caps(memory=8 * GiB),
            {
                "memory_total": 8 * GiB,
                "memory_available": 8 * GiB,
                "limits": (ResourceLimit("memory", "--memory", 8 * GiB, 16 * GiB),),
            },
            id="memory below available",
        ),
        pytest.param(
            Caps(memory=14 * GiB),
            {"memory_total": 14 * GiB, "limits": (ResourceLimit("memory", "--memory", 14 * GiB, 16 * GiB),)},
            id="memory between available and total keeps available",
        ),
        pytest.param(
            Caps(memory=1024 * GiB),
            {"memory_total": 1024 * GiB, "memory_available": 1020 * GiB},
            id="memory above total sets the total, same bytes in use",
        ),
        pytest.param(
            Caps(disk=10 * GiB), {"disk_total": 10 * GiB, "disk_free": 10 * GiB}, id="disk below free"
        ),
        pytest.param(
            Caps(disk=80 * GiB), {"disk_total": 80 * GiB}, id="disk between free and total keeps free"
        ),
        pytest.param(
            Caps(disk=10 * 1024 * GiB),
            {"disk_total": 10 * 1024 * GiB, "disk_free": 10200 * GiB},
            id="disk above total sets the total, same bytes in use",
        ),
    ],
)
def test_caps_set_the_advertised_totals(caps: Caps, expected: dict[str, Any]) -> None:
    # 4 cores at 25 % busy: 3 observed free, so a cap of 2 also lowers what is available.
    baseline = WorkerResources(
        cpu_total=4,
        cpu_available=3,
        memory_total=16 * GiB,
        memory_available=12 * GiB,
        disk_total=100 * GiB,
        disk_free=60 * GiB,
    )
    assert probe(FakePsutil(percents=[25.0]), caps).sample() == replace(baseline, **expected)


def test_cpu_cap_applies_the_machines_busy_fraction() -> None:
    # 8 cores at 75 % busy: a --cpus 4 worker offers 4 - round(4 * 0.75) = 1 core.
    sample = probe(FakePsutil(cores=8, percents=[75.0]), Caps(cpus=4)).sample()
    assert (sample.cpu_total, sample.cpu_available) == (4, 1)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        pytest.param({"cpus": -1}, ValueError, "--cpus", id="negative cpus"),
        pytest.param({"memory": -1}, ValueError, "--memory", id="negative memory"),
        pytest.param({"gpus": True}, TypeError, "--gpus", id="bool gpus"),
        pytest.param({"disk": 1.5}, TypeError, "--disk", id="float disk"),
        pytest.param({"memory": "8Gi"}, TypeError, "--memory", id="unparsed memory string"),
    ],
)
def test_caps_refuse_bad_values_naming_the_flag(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Caps(**kwargs)


# --- GPUs through the probe ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param([gpu(0)], id="one GPU"),
        pytest.param([gpu(i) for i in range(4)], id="four GPUs"),
        pytest.param([gpu(0), gpu(1, free=0)], id="GPU with no free VRAM is still listed"),
    ],
)
def test_gpus_come_from_the_first_reader_that_sees_any(gpus: list[Gpu]) -> None:
    assert probe(readers=[FakeReader(gpus)]).sample().gpus == tuple(gpus)


def test_gpus_are_reported_in_index_order() -> None:
    sample = probe(readers=[FakeReader([gpu(2), gpu(0), gpu(1)])]).sample()
    assert [g.index for g in sample.gpus] == [0, 1, 2]


def test_reader_with_zero_gpus_means_none_and_one_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="flux.worker"):
        p = probe(readers=[FakeReader([])])
        assert [p.sample().gpus for _ in range(3)] == [(), (), ()]
    assert len(caplog.records) == 1
    assert "FakeReader found no GPUs" in caplog.records[0].getMessage()


def test_nvml_failing_falls_back_to_gputil(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeReader(error="NVML could not start: Driver Not Loaded")
    gputil = FakeReader([gpu(0)])
    with caplog.at_level(logging.DEBUG, logger="flux.worker"):
        p = probe(readers=[nvml, gputil])
        for _ in range(3):
            assert p.sample().gpus == (gpu(0),)
    # Read once within the refresh window: GPUtil spawns nvidia-smi on every read.
    assert (nvml.reads, gputil.reads) == (1, 1)
    assert len(caplog.records) == 1
    assert "Driver Not Loaded" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("found", "window"),
    [
        pytest.param([gpu(0)], probe_module.GPU_REFRESH_SECONDS, id="gpus re-read after the refresh window"),
        pytest.param([], probe_module.NO_GPU_RETRY_SECONDS, id="no gpus retried after the retry window"),
    ],
)
def test_gpu_reads_are_cached_for_a_window(
    monkeypatch: pytest.MonkeyPatch, found: list[Gpu], window: float
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(probe_module.time, "monotonic", lambda: clock[0])
    reader = FakeReader(found)
    p = probe(readers=[reader])
    p.sample()
    clock[0] += window - 0.01
    p.sample()
    assert reader.reads == 1
    clock[0] += 0.02
    p.sample()
    assert reader.reads == 2


def test_both_readers_failing_means_no_gpus_and_exactly_one_log(caplog: pytest.LogCaptureFixture) -> None:
    readers = [FakeReader(error="NVML unavailable: no library"), FakeReader(error="GPUtil found no GPUs")]
    with caplog.at_level(logging.DEBUG, logger="flux.worker"):
        p = probe(readers=readers)
        samples = [p.sample() for _ in range(5)]
    assert all(sample.gpus == () for sample in samples)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "NVML unavailable: no library" in message and "GPUtil found no GPUs" in message


def test_reader_raising_something_unexpected_fails_soft(caplog: pytest.LogCaptureFixture) -> None:
    class Exploding:
        def read(self) -> list[Gpu]:
            raise RuntimeError("boom")

    with caplog.at_level(logging.DEBUG, logger="flux.worker"):
        assert probe(readers=[Exploding()]).sample().gpus == ()
    assert "boom" in caplog.text


@pytest.mark.parametrize(
    ("cap", "kept"),
    [
        pytest.param(0, [], id="zero"),
        pytest.param(2, [0, 1], id="first two by index"),
        pytest.param(8, [0, 1, 2, 3], id="above count never raises"),
    ],
)
def test_gpu_cap_keeps_the_first_n_by_index(cap: int, kept: list[int]) -> None:
    reader = FakeReader([gpu(3), gpu(1), gpu(0), gpu(2)])
    assert [g.index for g in probe(caps=Caps(gpus=cap), readers=[reader]).sample().gpus] == kept


def test_default_readers_are_nvml_then_gputil() -> None:
    p = ResourceProbe(psutil_module=FakePsutil())
    assert [type(r) for r in p._gpu_readers] == [NvmlReader, GputilReader]


# --- NvmlReader with a fake pynvml ----------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = FakeNVMLError

    def __init__(
        self,
        devices: list[tuple[Any, Any, int, int]],
        init_error: str | None = None,
        query_error: str | None = None,
    ) -> None:
        self.devices = devices  # (uuid, name, total, free), uuid/name as str or bytes
        self.init_error = init_error
        self.query_error = query_error
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        if self.query_error:
            raise FakeNVMLError(self.query_error)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return self.devices[handle][0]

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self.devices[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        _, _, total, free = self.devices[handle]
        return SimpleNamespace(total=total, used=total - free, free=free)


def test_nvml_reader_converts_devices_and_initialises_once() -> None:
    nvml = FakeNvml(
        [("GPU-aaa", "NVIDIA H200", 141 * GiB, 100 * GiB), (b"GPU-bbb", b"Tesla T4", 16 * GiB, 0)]
    )
    reader = NvmlReader(nvml)
    expected = [
        Gpu(0, "GPU-aaa", "NVIDIA H200", 141 * GiB, 100 * GiB),
        Gpu(1, "GPU-bbb", "Tesla T4", 16 * GiB, 0),
    ]
    assert reader.read() == expected
    assert reader.read() == expected
    assert nvml.inits == 1


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        pytest.param(FakeNvml([], init_error="Driver Not Loaded"), "NVML could not start", id="init fails"),
        pytest.param(
            FakeNvml([], query_error="GPU is lost"), "NVML query failed: GPU is lost", id="query fails"
        ),
        pytest.param(FakeNvml([]), "NVML reports no GPUs", id="no devices"),
    ],
)
def test_nvml_reader_failures_become_gpu_unavailable(nvml: FakeNvml, reason: str) -> None:
    with pytest.raises(GpuUnavailable, match=reason):
        NvmlReader(nvml).read()


def test_nvml_reader_retries_init_after_a_failed_query() -> None:
    nvml = FakeNvml([("GPU-aaa", "A100", 40 * GiB, 40 * GiB)], query_error="Uninitialized")
    reader = NvmlReader(nvml)
    with pytest.raises(GpuUnavailable):
        reader.read()
    nvml.query_error = None
    assert len(reader.read()) == 1
    assert nvml.inits == 2


def test_nvml_reader_without_pynvml_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(GpuUnavailable, match="nvidia-ml-py is not installed"):
        NvmlReader().read()


# --- GputilReader with a fake GPUtil ---------------------------------------------------------------


def gputil_gpu(index: int, total_mib: float, free_mib: float) -> Any:
    return SimpleNamespace(
        id=index, uuid=f"GPU-{index}", name="Tesla T4", memoryTotal=total_mib, memoryFree=free_mib
    )


def test_gputil_reader_converts_mib_to_bytes() -> None:
    fake = SimpleNamespace(
        getGPUs=lambda: [gputil_gpu(0, 15360.0, 15000.0), gputil_gpu(1, 15360.0, float("nan"))]
    )
    assert GputilReader(fake).read() == [
        Gpu(0, "GPU-0", "Tesla T4", 15360 * MiB, 15000 * MiB),
        Gpu(1, "GPU-1", "Tesla T4", 15360 * MiB, 0),  # "[N/A]" parsed to NaN: no usable VRAM
    ]


def _broken_nvidia_smi() -> list[Any]:
    # What GPUtil does when nvidia-smi prints an error instead of CSV.
    return [int("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")]


@pytest.mark.parametrize(
    ("get_gpus", "reason"),
    [
        pytest.param(lambda: [], "GPUtil found no GPUs", id="nvidia-smi missing returns []"),
        pytest.param(_broken_nvidia_smi, "is nvidia-smi broken", id="nvidia-smi broken raises"),
        pytest.param(lambda: [SimpleNamespace(id="x")], "unreadable GPU data", id="garbage device"),
    ],
)
def test_gputil_reader_failures_become_gpu_unavailable(get_gpus: Any, reason: str) -> None:
    with pytest.raises(GpuUnavailable, match=reason):
        GputilReader(SimpleNamespace(getGPUs=get_gpus)).read()


def test_gputil_reader_without_gputil_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "GPUtil", None)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(GpuUnavailable, match="GPUtil unavailable: .*GPUtil"):
        GputilReader().read()


def test_gputil_is_not_imported_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPUtil pulls in distutils and setuptools (about 15 MB per worker) only to find no nvidia-smi.
    monkeypatch.delitem(sys.modules, "GPUtil", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(GpuUnavailable, match="GPUtil unavailable: nvidia-smi is not on PATH"):
        GputilReader().read()
    assert "GPUtil" not in sys.modules


# --- software --------------------------------------------------------------------------------------


@dataclass
class FakeDist:
    name: str | None
    version: str | None
    file: str = "METADATA"  # PKG-INFO for an egg-info install

    def read_text(self, filename: str) -> str | None:
        """Its metadata file: headers, a blank line, then a description that must not be read as headers."""
        if filename != self.file or (self.name, self.version) == (None, None):
            return None  # no metadata file at all: a half-uninstalled distribution
        headers = [("Metadata-Version", "2.1"), ("Name", self.name), ("Version", self.version)]
        lines = [f"{key}: {value}" for key, value in headers if value is not None]
        return "\n".join([*lines, "Summary: a: colon", "", "Name: not-this", "Version: 0"]) + "\n"


def test_software_lists_installed_distributions_with_canonical_names() -> None:
    software = probe().software()
    assert "packaging" in software.packages
    assert "python_version" in software.marker_environment
    assert all(name == name.lower() and "_" not in name and "." not in name for name in software.packages)


def test_software_is_read_once() -> None:
    p = probe()
    assert p.software() is p.software()


def test_read_software_normalises_skips_broken_and_first_wins() -> None:
    dists = [
        FakeDist("Zope.Interface", "6.0"),
        FakeDist("zope_interface", "5.0"),  # shadowed later on sys.path
        FakeDist(None, "1.0"),
        FakeDist("no-version", None),
        FakeDist("", "1.0"),
        FakeDist(None, None),
        FakeDist("Egg.Style", "2.0", file="PKG-INFO"),
    ]
    software = read_software(dists, {"python_version": "3.11"})  # type: ignore[arg-type]
    assert dict(software.packages) == {"zope-interface": "6.0", "egg-style": "2.0"}
    assert dict(software.marker_environment) == {"python_version": "3.11"}


# --- changed_materially ----------------------------------------------------------------------------

BASE = WorkerResources(
    cpu_total=8,
    cpu_available=6,
    memory_total=16 * GiB,  # 5 % = 819.2 MiB, above the 256 MiB floor
    memory_available=8 * GiB,
    disk_total=2 * GiB,  # 5 % = 102.4 MiB, below the 256 MiB floor
    disk_free=1 * GiB,
    gpus=(gpu(0, free=40 * GiB, total=80 * GiB), gpu(1, free=80 * GiB, total=80 * GiB)),  # 5 % = 4 GiB
)
FIVE_PCT_16G = 16 * GiB // 20 + 1  # 16 GiB / 20 is not whole: the smallest whole 5 % is one byte more


def _gpus(free0: int, free1: int = 80 * GiB) -> tuple[Gpu, ...]:
    return (gpu(0, free=free0), gpu(1, free=free1))


@pytest.mark.parametrize(
    ("new", "changed"),
    [
        pytest.param(BASE, False, id="identical"),
        pytest.param(replace(BASE, cpu_total=7, cpu_available=6), True, id="cpu total"),
        pytest.param(replace(BASE, memory_total=15 * GiB), True, id="memory total"),
        pytest.param(replace(BASE, disk_total=3 * GiB), True, id="disk total"),
        pytest.param(replace(BASE, cpu_available=5), True, id="one core fewer"),
        pytest.param(replace(BASE, cpu_available=7), True, id="one core more"),
        pytest.param(
            replace(BASE, memory_available=8 * GiB - FIVE_PCT_16G + 1), False, id="memory just under 5%"
        ),
        pytest.param(replace(BASE, memory_available=8 * GiB - FIVE_PCT_16G), True, id="memory exactly 5%"),
        pytest.param(replace(BASE, memory_available=8 * GiB + FIVE_PCT_16G), True, id="memory up 5%"),
        pytest.param(
            replace(BASE, disk_free=1 * GiB - 256 * MiB + 1), False, id="disk just under 256MiB floor"
        ),
        pytest.param(replace(BASE, disk_free=1 * GiB - 256 * MiB), True, id="disk exactly 256MiB floor"),
        pytest.param(replace(BASE, gpus=BASE.gpus[:1]), True, id="GPU disappears"),
        pytest.param(replace(BASE, gpus=(*BASE.gpus, gpu(2))), True, id="GPU appears"),
        pytest.param(
            replace(BASE, gpus=(replace(BASE.gpus[0], uuid="GPU-x"), BASE.gpus[1])), True, id="GPU swapped"
        ),
        pytest.param(replace(BASE, gpus=tuple(reversed(BASE.gpus))), False, id="GPU order only"),
        pytest.param(replace(BASE, gpus=_gpus(40 * GiB - 4 * GiB + 1)), False, id="VRAM just under 5%"),
        pytest.param(replace(BASE, gpus=_gpus(36 * GiB)), True, id="VRAM exactly 5%"),
        pytest.param(replace(BASE, gpus=_gpus(40 * GiB, 0)), True, id="GPU loses all free VRAM"),
    ],
)
def test_changed_materially(new: WorkerResources, changed: bool) -> None:
    assert changed_materially(BASE, new) is changed


@pytest.mark.parametrize(
    ("old_free", "new_free", "changed"),
    [
        pytest.param(1, 0, True, id="VRAM runs out by one byte"),
        pytest.param(0, 1, True, id="VRAM frees one byte"),
    ],
)
def test_changed_materially_when_gpu_crosses_zero(old_free: int, new_free: int, changed: bool) -> None:
    old = replace(BASE, gpus=_gpus(old_free))
    assert changed_materially(old, replace(BASE, gpus=_gpus(new_free))) is changed


@pytest.mark.parametrize(
    ("total", "delta", "changed"),
    [
        pytest.param(512 * MiB, 128 * MiB - 1, False, id="512MiB total: just under a quarter"),
        pytest.param(512 * MiB, 128 * MiB, True, id="512MiB total: a quarter"),
        pytest.param(100 * MiB, 100 * MiB, True, id="tiny total: full to empty"),
        pytest.param(4 * GiB, 256 * MiB - 1, False, id="4GiB total: just under floor"),
        pytest.param(4 * GiB, 256 * MiB, True, id="4GiB total: floor"),
    ],
)
def test_memory_threshold_never_exceeds_what_can_move(total: int, delta: int, changed: bool) -> None:
    old = WorkerResources(memory_total=total, memory_available=total)
    assert changed_materially(old, replace(old, memory_available=total - delta)) is changed


# --- the real machine ------------------------------------------------------------------------------


def test_real_psutil_sample_is_sane() -> None:
    sample = ResourceProbe(gpu_readers=[]).sample()
    assert sample.cpu_total >= 1
    assert 0 <= sample.cpu_available <= sample.cpu_total
    assert sample.memory_total > 0
    assert 0 < sample.memory_available <= sample.memory_total
    assert sample.disk_total > 0
    assert 0 <= sample.disk_free <= sample.disk_total


# --- container limits: the smaller of host and container -------------------------------------------


@pytest.mark.parametrize(
    ("cgroups", "affinity", "cpu_total", "limit"),
    [
        pytest.param(CgroupLimits(), None, 4, None, id="no container: the host's 4 cores"),
        pytest.param(
            CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max")), None, 2,
            ResourceLimit("cpu", "cgroup cpu.max", 2, 4), id="quota of 2 on 4",
        ),
        pytest.param(
            CgroupLimits(cpu_quota=Limit(4, "cgroup cpu.max")), None, 4, None,
            id="quota equal to the host is no limit",
        ),
        pytest.param(
            CgroupLimits(cpu_quota=Limit(8, "cgroup cpu.max")), None, 4, None,
            id="quota above the host leaves the host",
        ),
        pytest.param(
            CgroupLimits(cpu_quota=Limit(3, "cgroup cpu.max"), cpuset=Limit(2, "cgroup cpuset.cpus.effective")),
            None, 2, ResourceLimit("cpu", "cgroup cpuset.cpus.effective", 2, 4), id="cpuset tighter than quota",
        ),
        pytest.param(
            CgroupLimits(cpu_quota=Limit(3, "cgroup cpu.max")), 1, 1,
            ResourceLimit("cpu", "sched_getaffinity", 1, 4), id="affinity mask tightest",
        ),
        pytest.param(CgroupLimits(), 4, 4, None, id="affinity of every core is no limit"),
    ],
)  # fmt: skip
def test_cpu_total_is_the_smallest_of_host_quota_cpuset_and_affinity(
    cgroups: CgroupLimits, affinity: int | None, cpu_total: int, limit: ResourceLimit | None
) -> None:
    sample = probe(cgroups=cgroups, affinity=affinity).sample()
    assert sample.cpu_total == sample.cpu_available == cpu_total
    assert sample.limit_of("cpu") == limit


def test_container_busy_fraction_applies_to_the_container_cores() -> None:
    # 50 % busy, 2 cores in the container: 2 - round(2 * 0.5) = 1 offered.
    sample = probe(
        FakePsutil(percents=[50.0]), cgroups=CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max"))
    ).sample()
    assert (sample.cpu_total, sample.cpu_available) == (2, 1)


@pytest.mark.parametrize(
    ("memory", "free", "expected"),
    [
        pytest.param(4 * GiB, 3 * GiB, (4 * GiB, 3 * GiB), id="4Gi container, 3Gi free in it"),
        pytest.param(4 * GiB, 0, (4 * GiB, 0), id="container full"),
        pytest.param(15 * GiB, 14 * GiB, (15 * GiB, 12 * GiB), id="host has less free than the container"),
        pytest.param(32 * GiB, 30 * GiB, (16 * GiB, 12 * GiB), id="limit above the host leaves the host"),
    ],
)
def test_memory_is_the_smaller_of_host_and_container(
    memory: int, free: int, expected: tuple[int, int]
) -> None:
    cgroups = CgroupLimits(memory=Limit(memory, "cgroup memory.max"), memory_free=free)
    sample = probe(cgroups=cgroups).sample()
    assert (sample.memory_total, sample.memory_available) == expected
    limited = memory < 16 * GiB
    assert (sample.limit_of("memory") is not None) == limited
    if limited:
        assert sample.limit_of("memory") == ResourceLimit("memory", "cgroup memory.max", memory, 16 * GiB)


def test_a_cap_below_the_container_is_the_limit_that_applied() -> None:
    cgroups = CgroupLimits(cpu_quota=Limit(3, "cgroup cpu.max"), memory=Limit(8 * GiB, "cgroup memory.max"),
                           memory_free=6 * GiB)  # fmt: skip
    sample = probe(caps=Caps(cpus=2, memory=4 * GiB), cgroups=cgroups).sample()
    assert sample.limits == (
        ResourceLimit("cpu", "--cpus", 2, 4),
        ResourceLimit("memory", "--memory", 4 * GiB, 16 * GiB),
    )
    assert (sample.cpu_total, sample.memory_total, sample.memory_available) == (2, 4 * GiB, 4 * GiB)


def test_limits_travel_on_the_wire() -> None:
    cgroups = CgroupLimits(cpu_quota=Limit(2, "cgroup cpu.max"), memory=Limit(4 * GiB, "cgroup memory.max"),
                           memory_free=GiB)  # fmt: skip
    sample = probe(cgroups=cgroups).sample()
    assert WorkerResources.from_proto(sample.to_proto()) == sample
    assert [x.describe() for x in sample.limits] == [
        "cpu 2 of 4 (cgroup cpu.max)",
        "memory 4.0 GiB of 16.0 GiB (cgroup memory.max)",
    ]


def test_the_default_cpu_observer_is_the_window_over_psutil_counters() -> None:
    p = ResourceProbe(gpu_readers=[], psutil_module=FakePsutil())
    assert isinstance(p._cpu, WindowedCpu)
