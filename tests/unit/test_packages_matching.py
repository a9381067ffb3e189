"""Package requirements against a worker's installed distributions (DESIGN §3, packages row).

PEP 503 names, full PEP 440 specifiers, PEP 508 markers evaluated against the
*worker's* environment, never the machine running the control plane.
"""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from flux.domain.worker import WorkerSoftware
from flux.matching import FeasibilityCache, Reason, Room, permanent_rejection, rejections, schedule
from flux.matching import filters as f
from flux.matching.packages import applies, unmet
from tests.unit.fleet import LINUX, WINDOWS, queue_of, shape, worker

OK = None
MISSING = "missing"

# (requirement, installed version or None, expected): OK, MISSING, or "wrong" (installed but unsatisfied).
VERSION_CASES = [
    # names
    pytest.param("numpy", "1.26.4", OK, id="bare name installed"),
    pytest.param("numpy", None, MISSING, id="missing package"),
    pytest.param("numpy", "garbage version!", OK, id="bare name accepts any installed version"),
    # >= and <=
    pytest.param("pandas>=1.3.0", "1.3.0", OK, id=">= exact boundary"),
    pytest.param("pandas>=1.3.0", "1.2.9", "wrong", id=">= one patch below"),
    pytest.param("pandas<=1.3", "1.3.0", OK, id="<= exact boundary (1.3 == 1.3.0)"),
    pytest.param("pandas<=1.3", "1.3.0.post1", "wrong", id="<= post-release above"),
    # ~=
    pytest.param("numpy~=2.2", "2.2", OK, id="~=2.2 lower bound"),
    pytest.param("numpy~=2.2", "2.9.1", OK, id="~=2.2 allows 2.9.1"),
    pytest.param("numpy~=2.2", "3.0", "wrong", id="~=2.2 excludes 3.0"),
    pytest.param("numpy~=2.2", "2.1", "wrong", id="~=2.2 excludes 2.1"),
    pytest.param("numpy~=1.4.5", "1.4.9", OK, id="~=1.4.5 allows 1.4.9"),
    pytest.param("numpy~=1.4.5", "1.5.0", "wrong", id="~=1.4.5 excludes 1.5.0"),
    # !=
    pytest.param("numpy!=1.5.0", "1.5.0", "wrong", id="!= excluded version"),
    pytest.param("numpy!=1.5.0", "1.5", "wrong", id="!= zero padding counts (1.5 == 1.5.0)"),
    pytest.param("numpy!=1.5.0", "1.5.1", OK, id="!= other version"),
    pytest.param("numpy!=2.*", "2.5", "wrong", id="!= wildcard excludes series"),
    pytest.param("numpy!=2.*", "3.0", OK, id="!= wildcard allows other series"),
    # < and >
    pytest.param("numpy<2", "1.99", OK, id="< below"),
    pytest.param("numpy<2", "2.0", "wrong", id="< exact boundary excluded"),
    pytest.param("numpy<2.0", "2.0rc1", "wrong", id="< excludes pre-releases of the bound (PEP 440)"),
    pytest.param("numpy>2", "2.0", "wrong", id="> exact boundary excluded"),
    pytest.param("numpy>2", "2.0.1", OK, id="> above"),
    pytest.param("torch>2.1.0", "2.1.0.post1", "wrong", id="> excludes post-releases of the bound"),
    pytest.param("torch>2.1.0", "2.1.0+cu121", "wrong", id="> excludes local versions of the bound"),
    # == and wildcards
    pytest.param("numpy==1.26.4", "1.26.4", OK, id="== exact"),
    pytest.param("numpy==1.26", "1.26.0", OK, id="== zero padding"),
    pytest.param("numpy==1.26.4", "1.26.5", "wrong", id="== other version"),
    pytest.param("numpy==2.*", "2.1.0", OK, id="==2.* in series"),
    pytest.param("numpy==2.*", "3.0", "wrong", id="==2.* out of series"),
    pytest.param("numpy==2.*", "2.0.0rc1", OK, id="==2.* installed pre-release in series"),
    pytest.param("torch==2.1.*", "2.1.0+cu121", OK, id="==2.1.* local version in series"),
    # several clauses
    pytest.param("numpy>=1,<2", "1.0", OK, id=">=1,<2 lower bound"),
    pytest.param("numpy>=1,<2", "1.9.9", OK, id=">=1,<2 inside"),
    pytest.param("numpy>=1,<2", "2.0", "wrong", id=">=1,<2 upper bound excluded"),
    pytest.param("numpy>=1,<2", "0.9", "wrong", id=">=1,<2 below"),
    pytest.param("torch>=2,<3,!=2.0.1", "2.0.1", "wrong", id="three clauses, excluded middle"),
    # local versions
    pytest.param("torch==2.1.0", "2.1.0+cu121", OK, id="local version satisfies ==public"),
    pytest.param("torch>=2", "2.1.0+cu121", OK, id="local version satisfies >="),
    pytest.param("torch>=2,<3", "2.1.0+cu121", OK, id="local version satisfies a range"),
    pytest.param("torch==2.1.0+cu118", "2.1.0+cu121", "wrong", id="other local label"),
    pytest.param("torch==2.1.0+cu121", "2.1.0+cu121", OK, id="same local label"),
    # installed pre-releases count (PEP 440: already installed)
    pytest.param("torch>=2.0", "2.1.0rc1", OK, id="installed rc satisfies a lower bound"),
    pytest.param("torch>=2.1.0", "2.1.0rc1", "wrong", id="rc is below its final release"),
    pytest.param("numpy>=1.0", "2.0.dev1", OK, id="installed dev release satisfies"),
    # arbitrary equality compares strings as installed
    pytest.param("foo===1.0.0-rc1", "1.0.0-rc1", OK, id="=== same string, unnormalised"),
    pytest.param("foo===1.0", "1.0.0", "wrong", id="=== is string equality, no zero padding"),
    pytest.param("foo===custom-build", "custom-build", OK, id="=== pins a non-PEP 440 version"),
    pytest.param("foo===custom-build", "other-build", "wrong", id="=== other non-PEP 440 version"),
    # unparseable installed versions
    pytest.param("numpy>=1", "not a version!", "wrong", id="unparseable installed version fails >="),
    pytest.param("numpy==1.*", "1.x", "wrong", id="unparseable installed version fails wildcard"),
    # extras do not change what must be installed
    pytest.param("requests[socks]>=2", "2.31.0", OK, id="extras ignored"),
]


def first_unmet(requirements, software):
    """The first requirement ``unmet`` yields, with its installed version (or None)."""
    return next(unmet(requirements, software), None)


@pytest.mark.parametrize(("text", "installed", "expected"), VERSION_CASES)
def test_version_specifiers(text, installed, expected):
    requirement = Requirement(text)
    software = WorkerSoftware({} if installed is None else {requirement.name: installed}, LINUX)
    got = first_unmet((requirement,), software)
    if expected is OK:
        assert got is None
    else:
        assert got == (requirement, None if expected == MISSING else installed)


NAME_CASES = [
    pytest.param("Scikit_Learn>=1.3", "scikit-learn", id="requirement spelled Scikit_Learn"),
    pytest.param("scikit-learn>=1.3", "Scikit_Learn", id="installed spelled Scikit_Learn"),
    pytest.param("SCIKIT.LEARN>=1.3", "scikit__learn", id="dots and runs of separators"),
    pytest.param("zope.interface", "zope-interface", id="dotted name"),
]


@pytest.mark.parametrize(("text", "installed_name"), NAME_CASES)
def test_names_compare_pep503_normalised(text, installed_name):
    software = WorkerSoftware({installed_name: "1.4.0"}, LINUX)
    assert first_unmet((Requirement(text),), software) is None
    # ...and the normalised name is still checked: another package is not a match.
    assert first_unmet((Requirement(text),), WorkerSoftware({"scikit-image": "1.4.0"}, LINUX)) is not None


def test_name_match_still_checks_the_version():
    software = WorkerSoftware({"scikit-learn": "1.2"}, LINUX)
    requirement = Requirement("Scikit_Learn>=1.3")
    assert first_unmet((requirement,), software) == (requirement, "1.2")


# (requirement, installed, marker environment, expected)
MARKER_CASES = [
    pytest.param(
        'pywin32; sys_platform == "win32"', {}, LINUX, OK, id="windows-only package ignored on linux"
    ),
    pytest.param(
        'pywin32; sys_platform == "win32"', {}, WINDOWS, MISSING, id="windows-only package required on win32"
    ),
    pytest.param(
        'pywin32>=306; sys_platform == "win32"',
        {"pywin32": "306"},
        WINDOWS,
        OK,
        id="windows-only package present on win32",
    ),
    pytest.param(
        'uvloop; platform_system != "Windows"', {}, LINUX, MISSING, id="negated marker applies on linux"
    ),
    pytest.param('tomli; python_version < "3.11"', {}, LINUX, OK, id="backport ignored on a newer python"),
    pytest.param(
        'tomli; python_version < "3.11"',
        {},
        {**LINUX, "python_version": "3.10"},
        MISSING,
        id="backport required on an older python",
    ),
    pytest.param(
        'numpy; python_version >= "3.10" and platform_machine == "aarch64"',
        {},
        LINUX,
        OK,
        id="and: one side false",
    ),
    pytest.param(
        'numpy; sys_platform == "darwin" or os_name == "posix"', {}, LINUX, MISSING, id="or: one side true"
    ),
    pytest.param(
        'pywin32; sys_platform == "win32"',
        {},
        {},
        MISSING,
        id="unreported marker variable requires the package",
    ),
    pytest.param(
        'pywin32; sys_platform == "win32"',
        {},
        {"python_version": "3.12"},
        MISSING,
        id="the variable the marker reads is the one that must be reported",
    ),
]


@pytest.mark.parametrize(("text", "installed", "environment", "expected"), MARKER_CASES)
def test_markers_use_the_workers_environment(text, installed, environment, expected):
    requirement = Requirement(text)
    software = WorkerSoftware(installed, environment)
    got = first_unmet((requirement,), software)
    assert got == (None if expected is OK else (requirement, None))
    assert applies(requirement, software) is (expected is not OK or bool(installed))


def test_first_unmet_returns_the_first_in_declared_order():
    requirements = tuple(Requirement(t) for t in ("numpy", "torch>=2", "pandas"))
    software = WorkerSoftware({"numpy": "2.0", "torch": "1.13.1"}, LINUX)
    assert first_unmet(requirements, software) == (requirements[1], "1.13.1")
    software = WorkerSoftware({"numpy": "2.0", "torch": "2.2"}, LINUX)
    assert first_unmet(requirements, software) == (requirements[2], None)
    software = WorkerSoftware({"numpy": "2.0", "torch": "2.2", "pandas": "2.1"}, LINUX)
    assert first_unmet(requirements, software) is None


def test_no_requirements_is_always_met():
    assert first_unmet((), WorkerSoftware()) is None


# ---- through the filter chain -------------------------------------------------------------------


def test_packages_filter_rejection_texts():
    shp = shape(packages=["Torch>=2"])
    [missing] = rejections(shp, worker())
    assert (missing.reason, missing.permanent, missing.offered, missing.detail) == (
        Reason.PACKAGE,
        True,
        "not installed",
        "lacks Torch>=2",
    )
    [old] = rejections(shp, worker(packages={"torch": "1.13.1"}))
    assert (old.offered, old.detail, old.plural) == (
        "Torch 1.13.1",
        "has Torch 1.13.1, not Torch>=2",
        "have Torch 1.13.1, not Torch>=2",
    )


def test_package_rejection_is_permanent_even_on_an_idle_worker():
    view = worker(packages={"numpy": "1.26"})
    got = permanent_rejection(shape(packages=["numpy>=2"]), view)
    assert got is not None and got.reason is Reason.PACKAGE
    assert f.packages(shape(packages=["numpy>=2"]), view, Room(view)) == got


def test_scheduler_places_only_where_packages_are_met():
    shp = shape(packages=["torch>=2,<3", 'pywin32; sys_platform == "win32"'])
    fleet = [
        worker("a-old-torch", packages={"torch": "1.13.1"}),
        worker("b-cuda", packages={"torch": "2.1.0+cu121"}),
        worker("c-windows", packages={"torch": "2.1.0"}, markers=WINDOWS),
        worker("d-none"),
    ]
    placements = schedule(queue_of(shp, shp), fleet, cache=FeasibilityCache())
    assert [p.worker for p in placements] == ["b-cuda", "b-cuda"]
