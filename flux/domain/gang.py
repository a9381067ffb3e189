"""A gang: one execution that runs on several workers at once, all of them or none.

``Gang(size=4, same="rack")`` asks for four members, each on its own worker, every one of
those workers with one value of the label ``rack``; ``spread="zone"`` puts each member on a
different value of ``zone``. Both may be given (same rack, different hosts). ``size=1`` is an
ordinary execution with ``ctx.gang`` set. A plain value, validated where it is built (the
decorator, a stored row, a run's ``gang_size=``), so a bad one never reaches the dispatcher.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from flux.domain.labels import KEY_FORM, validate_labels

# One member per worker: a gang larger than any fleet is refused at declaration, not queued forever.
MAX_GANG_SIZE = 1024
SIZE_FORM = f"an int between 1 and {MAX_GANG_SIZE}"


def validate_gang_size(value: object, field_name: str = "gang_size") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field_name} must be {SIZE_FORM}; got {type(value).__name__} {value!r}")
    if not 1 <= value <= MAX_GANG_SIZE:
        raise ValueError(f"{field_name} must be {SIZE_FORM}; got {value}")
    return value


def _label(value: object, field_name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field_name} must be a label key ({KEY_FORM}), or None; got {value!r}")
    try:
        validate_labels({value: ""}, field_name)
    except ValueError:
        raise ValueError(f"{field_name} must be a label key ({KEY_FORM}), or None; got {value!r}") from None
    return value


@dataclass(frozen=True, slots=True)
class Gang:
    """``size`` members, each on its own worker; ``same``: one value of that label for all of
    them; ``spread``: a different value of that label for each."""

    size: int
    same: str | None = None
    spread: str | None = None

    def __post_init__(self) -> None:
        validate_gang_size(self.size, "Gang.size")
        object.__setattr__(self, "same", _label(self.same, "Gang.same"))
        object.__setattr__(self, "spread", _label(self.spread, "Gang.spread"))
        if self.same is not None and self.same == self.spread:
            raise ValueError(
                f"Gang.same and Gang.spread name the same label {self.same!r}; "
                "members cannot share one value of it and each have a different one"
            )

    def with_size(self, size: int) -> Gang:
        """The same topology for a run's ``gang_size=``."""
        return replace(self, size=validate_gang_size(size))

    def describe(self) -> str:
        """``gang of 4 same rack spread host``: how explain names it."""
        text = f"gang of {self.size}"
        if self.same:
            text += f" same {self.same}"
        if self.spread:
            text += f" spread {self.spread}"
        return text

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"size": self.size}
        if self.same:
            found["same"] = self.same
        if self.spread:
            found["spread"] = self.spread
        return found

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: object, field_name: str = "gang") -> Gang:
        if not isinstance(data, dict) or "size" not in data:
            raise ValueError(f"{field_name} must be an object with 'size' and optional 'same', 'spread'")
        unknown = set(data) - {"size", "same", "spread"}
        if unknown:
            raise ValueError(
                f"{field_name} has unknown fields {sorted(unknown)}; it takes size, same, spread"
            )
        return cls(data["size"], data.get("same"), data.get("spread"))

    def to_proto(self) -> Any:
        from flux.v1 import gang_pb2  # noqa: PLC0415 - protobuf only at the edges that convert

        return gang_pb2.GangSpec(size=self.size, same=self.same or "", spread=self.spread or "")

    @classmethod
    def from_proto(cls, message: Any, field_name: str = "gang") -> Gang:
        """A ``GangSpec``; a bad one raises ``ValueError``/``TypeError`` naming ``field_name``."""
        try:
            return cls(message.size, message.same or None, message.spread or None)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{field_name}: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Gang | None:
        """A stored column: empty (older rows, no gang) is None."""
        return cls.from_dict(json.loads(text)) if text else None


@dataclass(frozen=True, slots=True)
class GangMember:
    """One member as every member sees it: its rank, its worker and the address it advertises."""

    rank: int
    worker: str
    address: str = ""


@dataclass(frozen=True, slots=True)
class GangInfo:
    """``ctx.gang``: this member's rank, the gang's size, every member, and the leader (rank 0)."""

    rank: int
    size: int
    members: tuple[GangMember, ...]

    @property
    def leader(self) -> GangMember:
        return self.members[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True, slots=True)
class GangRun:
    """A gang execution's own record: its size, and once placed, each member's worker, GPUs and
    address, which ranks have claimed and each rank's output. Stored with the execution (one
    JSON column), reset for each attempt."""

    size: int
    # By rank, each (worker, address, GPU indices); empty while pending.
    members: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    claimed: frozenset[int] = frozenset()
    # (rank, output JSON) of the members that completed, by rank.
    outputs: tuple[tuple[int, str], ...] = ()

    def rank_of(self, worker: str) -> int | None:
        for rank, member in enumerate(self.members):
            if member[0] == worker:
                return rank
        return None

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(member[0] for member in self.members)

    @property
    def all_claimed(self) -> bool:
        return len(self.claimed) == self.size

    @property
    def all_completed(self) -> bool:
        return len(self.outputs) == self.size

    def placed(self, members: tuple[tuple[str, str, tuple[int, ...]], ...]) -> GangRun:
        return GangRun(self.size, members)

    def reset(self) -> GangRun:
        """For the next attempt: nothing placed, claimed or returned."""
        return GangRun(self.size)

    def claim(self, rank: int) -> GangRun:
        return replace(self, claimed=self.claimed | {rank})

    def complete(self, rank: int, output_json: str) -> GangRun:
        outputs = dict(self.outputs)
        outputs[rank] = output_json
        return replace(self, outputs=tuple(sorted(outputs.items())))

    def info(self, rank: int) -> GangInfo:
        """``ctx.gang`` for the member of ``rank``."""
        return GangInfo(
            rank,
            self.size,
            tuple(GangMember(r, worker, address) for r, (worker, address, _) in enumerate(self.members)),
        )

    def to_proto(self) -> list[Any]:
        """The members as ``GangMember`` messages, by rank."""
        from flux.v1 import gang_pb2  # noqa: PLC0415 - protobuf only at the edges that convert

        outputs = dict(self.outputs)
        return [
            gang_pb2.GangMember(
                rank=rank, worker=worker, address=address, gpu_indices=list(gpus),
                claimed=rank in self.claimed, completed=rank in outputs, output_json=outputs.get(rank, ""),
            )
            for rank, (worker, address, gpus) in enumerate(self.members)
        ]  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(
            {
                "size": self.size,
                "members": [[w, a, list(g)] for w, a, g in self.members],
                "claimed": sorted(self.claimed),
                "outputs": [[r, o] for r, o in self.outputs],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> GangRun | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(
            data["size"],
            tuple((w, a, tuple(g)) for w, a, g in data.get("members", ())),
            frozenset(data.get("claimed", ())),
            tuple((r, o) for r, o in data.get("outputs", ())),
        )
