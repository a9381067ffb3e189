"""Does a worker's installed software satisfy a list of PEP 508 requirements?

Names compare PEP 503-normalised; versions by full PEP 440 rules through
``packaging``: local versions satisfy their public version (``2.1.0+cu121``
meets ``==2.1.0``), and an *installed* pre-release counts, as PEP 440 tells
installers to accept pre-releases already present on the system.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
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


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# ``extra`` is not a property of the worker; packaging defaults it to "".
_NOT_VARIABLES = frozenset({"and", "or", "in", "not", "extra"})


@lru_cache(maxsize=4096)
def _marker_variables(marker: str) -> frozenset[str]:
    """Environment variables a normalised marker reads (values are quoted, so stripped first)."""
    return frozenset(_WORD.findall(_QUOTED.sub("", marker))) - _NOT_VARIABLES


def applies(requirement: Requirement, software: WorkerSoftware) -> bool:
    """False when the requirement's marker excludes this worker's environment."""
    if requirement.marker is None:
        return True
    if not _marker_variables(str(requirement.marker)) <= software.marker_environment.keys():
        # packaging fills an unreported variable from *this* process (the control
        # plane's platform), which says nothing about the worker: require the package.
        return True
    try:
        return requirement.marker.evaluate(dict(software.marker_environment))
    except (UndefinedEnvironmentName, UndefinedComparison):
        # The worker did not report that marker variable: require the package
        # rather than guess, so a missing report can only make matching stricter.
        return True


def unmet(
    requirements: tuple[Requirement, ...], software: WorkerSoftware
) -> Iterator[tuple[Requirement, str | None]]:
    """Each requirement the worker does not satisfy, in declared order, with its installed version (or None)."""
    installed = software.packages
    for requirement in requirements:
        if not applies(requirement, software):
            continue
        found = installed.get(_canonical(requirement.name))
        if found is None:
            yield requirement, None
        elif requirement.specifier and not _satisfies(requirement.specifier, found):
            yield requirement, found


def _satisfies(specifier: SpecifierSet, installed: str) -> bool:
    if any(spec.operator == "===" for spec in specifier):
        # Arbitrary equality compares the installed string as written (PEP 440): it
        # must not be normalised through Version, and it is how non-PEP 440 versions pin.
        try:
            return specifier.contains(installed, prereleases=True)
        except InvalidVersion:
            return False
    version = _version(installed)
    return version is not None and specifier.contains(version, prereleases=True)
