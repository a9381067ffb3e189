"""Does a worker's installed software satisfy a list of PEP 508 requirements?

Names compare PEP 503-normalised; versions by full PEP 440 rules through
``packaging``: local versions satisfy their public version (``2.1.0+cu121``
meets ``==2.1.0``), and an *installed* pre-release counts, as PEP 440 tells
installers to accept pre-releases already present on the system.
"""

from __future__ import annotations

from functools import lru_cache

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from flux.domain.worker import WorkerSoftware


@lru_cache(maxsize=65536)
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


@lru_cache(maxsize=16384)
def _canonical(name: str) -> str:
    return canonicalize_name(name)


def applies(requirement: Requirement, software: WorkerSoftware) -> bool:
    """False when the requirement's marker excludes this worker's environment."""
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate(dict(software.marker_environment))
    except (UndefinedEnvironmentName, UndefinedComparison):
        # The worker did not report that marker variable: require the package
        # rather than guess, so a missing report can only make matching stricter.
        return True


def first_unmet(
    requirements: tuple[Requirement, ...], software: WorkerSoftware
) -> tuple[Requirement, str | None] | None:
    """The first requirement the worker does not satisfy, with its installed version (or None)."""
    installed = software.packages
    for requirement in requirements:
        if not applies(requirement, software):
            continue
        found = installed.get(_canonical(requirement.name))
        if found is None:
            return requirement, None
        if not requirement.specifier:
            continue
        version = _version(found)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            return requirement, found
    return None
