"""What a workflow needs from a worker, validated when it is declared.

A bad value must fail at the ``@workflow.with_options`` line the user wrote,
never later inside the dispatcher, so every field is checked here and every
message names the field and the forms it accepts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement

from flux.domain.quantity import BINARY_SUFFIXES, DECIMAL_SUFFIXES, format_bytes, parse_bytes, show_int

if TYPE_CHECKING:
    from flux.v1 import resources_pb2

# int32 in the wire contract.
MAX_COUNT = 2**31 - 1
MAX_PACKAGES = 256
MAX_REQUIREMENT_LENGTH = 1024


@dataclass(frozen=True, slots=True, init=False)
class ResourceRequest:
    """CPU cores, memory, GPUs, disk and packages an execution needs.

    Every field is optional; zero or empty means "not checked". ``memory`` and
    ``disk`` take bytes as an int or a quantity string (``"8Gi"``, ``"10G"``)
    and are stored as int bytes. ``packages`` are PEP 508 strings.
    ``gpu_memory`` (same forms as ``memory``) is the free VRAM each of the
    ``gpu`` assigned devices must have, so it needs ``gpu >= 1``.
    """

    cpu: int
    memory: int
    gpu: int
    disk: int
    packages: tuple[str, ...]
    gpu_memory: int

    def __init__(
        self,
        cpu: int | None = None,
        memory: int | str | None = None,
        gpu: int | None = None,
        disk: int | str | None = None,
        packages: Iterable[str] | None = None,
        gpu_memory: int | str | None = None,
    ) -> None:
        object.__setattr__(self, "cpu", _count(cpu, "cpu", "cores"))
        object.__setattr__(self, "memory", 0 if memory is None else parse_bytes(memory, "memory"))
        object.__setattr__(self, "gpu", _count(gpu, "gpu", "GPUs"))
        object.__setattr__(self, "disk", 0 if disk is None else parse_bytes(disk, "disk"))
        object.__setattr__(self, "packages", _requirements(packages))
        object.__setattr__(
            self, "gpu_memory", 0 if gpu_memory is None else parse_bytes(gpu_memory, "gpu_memory")
        )
        if self.gpu_memory and not self.gpu:
            # Per device: without a count there is no device to hold it to, and guessing
            # gpu=1 would hide a typo in the declaration.
            raise ValueError(
                f"gpu_memory is the free VRAM each assigned GPU must have, so it needs gpu >= 1; "
                f"got gpu_memory={_quantity_repr(self.gpu_memory)} with no gpu, "
                f"e.g. ResourceRequest(gpu=1, gpu_memory='20Gi')"
            )

    # Factories read well at the declaration site: requests=ResourceRequest.with_gpu(2).
    @classmethod
    def with_cpu(cls, cpu: int) -> ResourceRequest:
        return cls(cpu=cpu)

    @classmethod
    def with_memory(cls, memory: int | str) -> ResourceRequest:
        return cls(memory=memory)

    @classmethod
    def with_gpu(cls, gpu: int) -> ResourceRequest:
        return cls(gpu=gpu)

    @classmethod
    def with_disk(cls, disk: int | str) -> ResourceRequest:
        return cls(disk=disk)

    @classmethod
    def with_packages(cls, packages: Iterable[str]) -> ResourceRequest:
        return cls(packages=packages)

    @property
    def is_empty(self) -> bool:
        return not (self.cpu or self.memory or self.gpu or self.disk or self.packages or self.gpu_memory)

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """Parsed ``packages``; parsing succeeded at construction, so this cannot fail."""
        return tuple(Requirement(text) for text in self.packages)

    def __repr__(self) -> str:
        parts = []
        if self.cpu:
            parts.append(f"cpu={self.cpu}")
        if self.memory:
            parts.append(f"memory={_quantity_repr(self.memory)}")
        if self.gpu:
            parts.append(f"gpu={self.gpu}")
        if self.gpu_memory:
            parts.append(f"gpu_memory={_quantity_repr(self.gpu_memory)}")
        if self.disk:
            parts.append(f"disk={_quantity_repr(self.disk)}")
        if self.packages:
            parts.append(f"packages={list(self.packages)!r}")
        return f"ResourceRequest({', '.join(parts)})"

    def describe(self) -> str:
        """Short human form for tables: ``4 cores, 8.0 GiB, 1 GPU, torch>=2``."""
        parts = []
        if self.cpu:
            parts.append(f"{self.cpu} core{'s' if self.cpu != 1 else ''}")
        if self.memory:
            parts.append(format_bytes(self.memory))
        if self.gpu:
            vram = f" with {format_bytes(self.gpu_memory)} free" if self.gpu_memory else ""
            parts.append(f"{self.gpu} GPU{'s' if self.gpu != 1 else ''}{vram}")
        if self.disk:
            parts.append(f"{format_bytes(self.disk)} disk")
        parts.extend(self.packages)
        return ", ".join(parts) or "nothing"

    def to_proto(self) -> resources_pb2.ResourceRequest:
        from flux.v1 import resources_pb2

        return resources_pb2.ResourceRequest(
            cpu=self.cpu,
            memory=self.memory,
            gpu=self.gpu,
            disk=self.disk,
            packages=list(self.packages),
            gpu_memory=self.gpu_memory,
        )

    @classmethod
    def from_proto(cls, message: resources_pb2.ResourceRequest) -> ResourceRequest:
        """Validate a wire message exactly as a declaration: negative values are refused."""
        return cls(
            cpu=message.cpu,
            memory=message.memory,
            gpu=message.gpu,
            disk=message.disk,
            packages=list(message.packages),
            gpu_memory=message.gpu_memory,
        )


def _quantity_repr(value: int) -> str:
    """Show bytes in the shortest exact form a user would write: ``'8Gi'``, ``'50G'``."""
    forms = [str(value)]
    for suffix, size in (*BINARY_SUFFIXES.items(), *DECIMAL_SUFFIXES.items()):
        if value % size == 0:
            forms.append(repr(f"{value // size}{suffix}"))
    return min(forms, key=len)


def _count(value: object, field: str, unit: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{field} must be an int number of {unit} (>= 0); got bool {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field} must be a finite whole number of {unit}; got {value!r}")
        if not value.is_integer():
            raise ValueError(f"{field} must be a whole number of {unit} (>= 0); got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise TypeError(
            f"{field} must be an int number of {unit} (>= 0); got {type(value).__name__} {value!r}"
        )
    if value < 0:
        raise ValueError(f"{field} must be >= 0 {unit} (0 means not checked); got {show_int(value)}")
    if value > MAX_COUNT:
        raise ValueError(f"{field} must be at most {MAX_COUNT} {unit}; got {show_int(value)}")
    return value


def _requirements(packages: Iterable[str] | None) -> tuple[str, ...]:
    if packages is None:
        return ()
    if isinstance(packages, str | bytes):
        raise TypeError(
            f"packages must be a list of PEP 508 strings, e.g. ['numpy', 'torch>=2,<3']; "
            f"got the single string {packages!r}"
        )
    try:
        items = list(packages)
    except TypeError:
        raise TypeError(
            f"packages must be a list of PEP 508 strings, e.g. ['numpy', 'torch>=2,<3']; "
            f"got {type(packages).__name__}"
        ) from None
    if len(items) > MAX_PACKAGES:
        raise ValueError(f"packages holds {len(items)} requirements; at most {MAX_PACKAGES} are allowed")
    normalised = []
    for position, item in enumerate(items):
        field = f"packages[{position}]"
        if not isinstance(item, str):
            raise TypeError(
                f"{field} must be a PEP 508 string such as 'pandas>=1.3'; got {type(item).__name__} {item!r}"
            )
        if len(item) > MAX_REQUIREMENT_LENGTH:
            raise ValueError(f"{field} is longer than {MAX_REQUIREMENT_LENGTH} characters")
        try:
            requirement = Requirement(item)
        except InvalidRequirement as exc:
            detail = str(exc).splitlines()[0]
            raise ValueError(
                f"{field}: {item!r} is not a valid PEP 508 requirement ({detail}); "
                f"use forms such as 'numpy', 'pandas>=1.3.0', 'torch>=2,<3'"
            ) from None
        normalised.append(str(requirement))
    return tuple(normalised)
