"""A placement policy's name, as a workflow declares it and a server is started with.

``spread`` (least loaded worker first, the default) or ``binpack`` (the fullest worker that
fits first); what each does is ``flux.matching.placement``.
"""

from __future__ import annotations

SPREAD = "spread"
BINPACK = "binpack"
PLACEMENTS = (SPREAD, BINPACK)
DEFAULT_PLACEMENT = SPREAD
PLACEMENT_FORM = (
    "'spread' (least loaded worker first, the default) or 'binpack' (fullest worker that fits first)"
)


def validate_placement(value: object, field_name: str = "placement", allow_empty: bool = False) -> str:
    """``spread`` or ``binpack`` (``""`` too with ``allow_empty``: the server's default).

    The error names the field and the accepted forms; a bad value never reaches the dispatcher.
    """
    if not isinstance(value, str):
        raise TypeError(f"{field_name} must be {PLACEMENT_FORM}; got {type(value).__name__} {value!r}")
    if value in PLACEMENTS or (allow_empty and value == ""):
        return value
    raise ValueError(f"{field_name} must be {PLACEMENT_FORM}; got {value!r}")
