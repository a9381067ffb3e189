"""GPU readers: NVML first, GPUtil (which shells out to ``nvidia-smi``) as a fallback.

Each reader turns every way of "no usable GPU information" (library not
installed, no driver, broken ``nvidia-smi``) into ``GpuUnavailable`` with a
reason a person can act on; the probe decides what to log and when. The vendor
module is injectable so the conversion code is tested without a GPU.
"""

from __future__ import annotations

import math
import shutil
from typing import Any, Protocol

from flux.domain.worker import Gpu

MIB = 1024 * 1024


class GpuUnavailable(Exception):
    """This reader cannot report GPUs; ``str(exc)`` says why."""


class GpuReader(Protocol):
    def read(self) -> list[Gpu]:
        """Return the GPUs this reader sees, or raise ``GpuUnavailable``."""
        ...


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes, newer ones str.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class NvmlReader:
    """Reads GPUs through NVML (``pynvml`` from the nvidia-ml-py package).

    NVML is initialised once and kept for the process: ``nvmlInit`` is
    reference-counted and costs far more than a query, and a worker samples
    for its whole life. A failed init is retried on the next read, so a driver
    that comes up after the worker started is picked up.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._initialised = False

    def read(self) -> list[Gpu]:
        nvml = self._load()
        if not self._initialised:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                raise GpuUnavailable(f"NVML could not start (no NVIDIA driver?): {exc}") from exc
            self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
            gpus = []
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                # NVML numbers GPUs in PCI bus order; CUDA agrees only under
                # CUDA_DEVICE_ORDER=PCI_BUS_ID, which whoever launches the work must set.
                gpus.append(
                    Gpu(
                        index=index,
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        name=_text(nvml.nvmlDeviceGetName(handle)),
                        memory_total=int(memory.total),
                        memory_free=int(memory.free),
                    )
                )
        except nvml.NVMLError as exc:
            # A lost GPU or unloaded driver can leave NVML unusable; start over next time.
            self._initialised = False
            raise GpuUnavailable(f"NVML query failed: {exc}") from exc
        if not gpus:
            raise GpuUnavailable("NVML reports no GPUs")
        return gpus

    def _load(self) -> Any:
        if self._module is None:
            try:
                import pynvml
            except ImportError as exc:
                raise GpuUnavailable(f"NVML unavailable: nvidia-ml-py is not installed ({exc})") from exc
            self._module = pynvml
        return self._module


def _mib_to_bytes(value: object) -> int:
    # GPUtil turns an unparsable nvidia-smi field ("[N/A]") into NaN.
    try:
        mib = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
    return int(mib * MIB) if math.isfinite(mib) and mib > 0 else 0


class GputilReader:
    """Reads GPUs through GPUtil, which parses ``nvidia-smi`` output (memory in MiB)."""

    def __init__(self, module: Any = None) -> None:
        self._module = module

    def read(self) -> list[Gpu]:
        gputil = self._load()
        try:
            found = gputil.getGPUs()
        except Exception as exc:
            # GPUtil parses nvidia-smi's CSV by hand: a broken nvidia-smi surfaces as any error.
            raise GpuUnavailable(f"GPUtil failed (is nvidia-smi broken?): {exc!r}") from exc
        if not found:
            # GPUtil also returns [] when nvidia-smi cannot be run at all.
            raise GpuUnavailable("GPUtil found no GPUs (nvidia-smi missing or reports none)")
        try:
            return [
                Gpu(
                    index=int(gpu.id),
                    uuid=str(gpu.uuid),
                    name=str(gpu.name),
                    memory_total=_mib_to_bytes(gpu.memoryTotal),
                    memory_free=_mib_to_bytes(gpu.memoryFree),
                )
                for gpu in found
            ]
        except (AttributeError, TypeError, ValueError) as exc:
            raise GpuUnavailable(f"GPUtil returned unreadable GPU data: {exc!r}") from exc

    def _load(self) -> Any:
        if self._module is None:
            if shutil.which("nvidia-smi") is None:
                # GPUtil only runs nvidia-smi; without it, importing GPUtil (which pulls in distutils
                # and setuptools: about 15 MB and 0.1 s per worker) could only find nothing.
                raise GpuUnavailable("GPUtil unavailable: nvidia-smi is not on PATH")
            try:
                import GPUtil
            except ImportError as exc:
                # Also raised on Python >= 3.12 without setuptools: GPUtil imports distutils.
                raise GpuUnavailable(f"GPUtil unavailable: {exc}") from exc
            self._module = GPUtil
        return self._module


class SimulatedGpuReader:
    """GPUs described rather than detected: ``FLUX_SIMULATED_GPUS=4`` or ``"2:80Gi,1:0"``.

    For demos and integration tests on machines without GPUs, so a real worker
    process can advertise devices. Each comma-separated item is ``COUNT`` or
    ``COUNT:FREE_VRAM`` (a quantity; ``0`` makes a device with no free VRAM).
    """

    ENV = "FLUX_SIMULATED_GPUS"

    def __init__(self, spec: str) -> None:
        from flux.domain.quantity import parse_bytes

        self._gpus: list[Gpu] = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            count_text, _, free_text = item.partition(":")
            if not count_text.isdigit():
                raise ValueError(f"{self.ENV}: {item!r} must be COUNT or COUNT:FREE_VRAM, e.g. 4 or 2:80Gi")
            free = parse_bytes(free_text, self.ENV) if free_text else 80 * 1024**3
            for _ in range(int(count_text)):
                index = len(self._gpus)
                self._gpus.append(
                    Gpu(index, f"GPU-simulated-{index}", "Simulated GPU", max(free, 80 * 1024**3), free)
                )

    def read(self) -> list[Gpu]:
        if not self._gpus:
            raise GpuUnavailable(f"{self.ENV} describes no GPUs")
        return list(self._gpus)
