"""Reading ``@workflow`` declarations from source without running it (flux.registration.declarations, flux.registration.loader)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from flux.domain.resource_request import ResourceRequest
from flux.registration.declarations import NotStatic, SourceError, read_declarations
from flux.registration.loader import NeedsImport, _import, load_workflow_file
from flux.workflow import WorkflowDefinition

ROOT = Path(__file__).resolve().parents[2]
HEADER = (
    "from flux import workflow, ExecutionContext\nfrom flux.domain.resource_request import ResourceRequest\n"
)


def read(body: str, header: str = HEADER) -> list[WorkflowDefinition]:
    return read_declarations(header + textwrap.dedent(body), "wf.py")


def one(body: str, header: str = HEADER) -> WorkflowDefinition:
    [definition] = read(body, header)
    return definition


# (source body, header, expected definition)
READS = [
    pytest.param(
        "@workflow\nasync def hello(ctx):\n    return 1\n",
        HEADER,
        WorkflowDefinition("hello", "hello"),
        id="bare @workflow, async",
    ),
    pytest.param(
        "@workflow\ndef add(ctx):\n    return 1\n",
        HEADER,
        WorkflowDefinition("add", "add", is_async=False),
        id="bare @workflow, sync",
    ),
    pytest.param(
        """
        @workflow.with_options(
            name="data_processing_workflow",
            requests=ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
            affinity={"role": "training"},
        )
        async def data_processing_workflow(ctx: ExecutionContext[dict[str, str]]):
            return {"rows": len(ctx.input)}
        """,
        HEADER,
        WorkflowDefinition(
            "data_processing_workflow",
            "data_processing_workflow",
            ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
            {"role": "training"},
        ),
        id="with_options literal (the DESIGN example)",
    ),
    pytest.param(
        "@workflow.with_options(name='ft', requests=ResourceRequest.with_gpu(2))\nasync def fine_tune(ctx): ...\n",
        HEADER,
        WorkflowDefinition("ft", "fine_tune", ResourceRequest(gpu=2)),
        id="factory",
    ),
    pytest.param(
        "@workflow.with_options(requests=ResourceRequest.with_packages(['torch>=2', 'numpy']))\n"
        "def job(ctx): ...\n",
        HEADER,
        WorkflowDefinition("job", "job", ResourceRequest(packages=["torch>=2", "numpy"]), is_async=False),
        id="factory with a list",
    ),
    pytest.param(
        # A factory called on an instance is still the classmethod: exactly what Python does.
        "@workflow.with_options(requests=ResourceRequest(cpu=4).with_memory('1Gi'))\nasync def job(ctx): ...\n",
        HEADER,
        WorkflowDefinition("job", "job", ResourceRequest(memory="1Gi")),
        id="factory chained on an instance behaves as in Python",
    ),
    pytest.param(
        """
        @workflow.with_options(
            affinity={"role": "training", "example.com/zone": "eu-1", "tier": "gold"},
            max_attempts=5,
        )
        async def train(ctx): ...
        """,
        HEADER,
        WorkflowDefinition(
            "train",
            "train",
            affinity={"role": "training", "example.com/zone": "eu-1", "tier": "gold"},
            max_attempts=5,
        ),
        id="affinity of several labels and max_attempts",
    ),  # fmt: skip
    pytest.param(
        "@workflow.with_options('positional', ResourceRequest(gpu=1))\nasync def job(ctx): ...\n",
        HEADER,
        WorkflowDefinition("positional", "job", ResourceRequest(gpu=1)),
        id="positional options",
    ),
    pytest.param(
        "CPUS = 8\nLABELS = {'role': 'x'}\n"
        "@workflow.with_options(requests=ResourceRequest(cpu=CPUS, memory=16 * 1024**3), affinity=LABELS)\n"
        "async def job(ctx): ...\n",
        HEADER,
        WorkflowDefinition("job", "job", ResourceRequest(cpu=8, memory="16Gi"), {"role": "x"}),
        id="module constants and arithmetic",
    ),
    pytest.param(
        "@wf.with_options(requests=RR(cpu=1))\nasync def job(ctx): ...\n",
        "from flux import workflow as wf\nfrom flux.domain.resource_request import ResourceRequest as RR\n",
        WorkflowDefinition("job", "job", ResourceRequest(cpu=1)),
        id="aliases",
    ),
    pytest.param(
        "@flux.workflow.with_options(requests=flux.ResourceRequest(gpu=1))\nasync def job(ctx): ...\n",
        "import flux\n",
        WorkflowDefinition("job", "job", ResourceRequest(gpu=1)),
        id="import flux",
    ),
    pytest.param(
        "@workflow\nasync def job(ctx): ...\n",
        "from flux import *\n",
        WorkflowDefinition("job", "job"),
        id="star import",
    ),
    pytest.param(
        "import torch_not_installed_xyz\nfrom torch_not_installed_xyz import nn\n"
        "@workflow.with_options(requests=ResourceRequest(gpu=1, packages=['torch']))\n"
        "async def train(ctx):\n    return nn.thing()\n",
        HEADER,
        WorkflowDefinition("train", "train", ResourceRequest(gpu=1, packages=["torch"])),
        id="imports that are not installed are never run",
    ),
    pytest.param(
        "@workflow\nasync def job(ctx): return 1\n@workflow.with_options(max_attempts=2)\nasync def job(ctx): ...\n",
        HEADER,
        WorkflowDefinition("job", "job", max_attempts=2),
        id="a later definition replaces an earlier one, as at import",
    ),
]


def test_gpu_memory_is_read_statically():
    body = "@workflow.with_options(requests=ResourceRequest(gpu=2, gpu_memory='20Gi'))\nasync def train(ctx): ...\n"
    assert one(body, HEADER).requests == ResourceRequest(gpu=2, gpu_memory=20 * 1024**3)


def test_priority_is_read_statically_and_bounds_name_the_line():
    assert one("@workflow.with_options(priority=-5)\nasync def batch(ctx): ...\n").priority == -5
    with pytest.raises(ValueError, match=r":3: priority must be between -1000 and 1000"):
        read("@workflow.with_options(\n    priority=2000)\nasync def batch(ctx): ...\n")


@pytest.mark.parametrize(("body", "header", "expected"), READS)
def test_reads_declarations(body, header, expected):
    assert one(body, header) == expected


def test_undecorated_redefinition_removes_the_workflow():
    assert read("@workflow\nasync def job(ctx): ...\nasync def job(ctx): ...\n") == []


def test_nested_and_unrelated_decorators_are_ignored():
    got = read(
        "import functools\n@functools.cache\ndef helper(): ...\n"
        "class Thing:\n    @property\n    def x(self): ...\n@workflow\nasync def job(ctx): ...\n"
    )
    assert [d.name for d in got] == ["job"]


# (body, line, text quoted in the message)
NOT_STATIC = [
    pytest.param(
        "def make(): return ResourceRequest(cpu=1)\n@workflow.with_options(requests=make())\nasync def j(ctx): ...\n",
        4,
        "requests=make()",
        id="a call of the user's own function",
    ),
    pytest.param(
        "from settings import LABELS\n@workflow.with_options(affinity=LABELS)\nasync def j(ctx): ...\n",
        4,
        "affinity=LABELS",
        id="an imported constant",
    ),
    pytest.param(
        "OPTIONS = {'name': 'x'}\n@workflow.with_options(**OPTIONS)\nasync def j(ctx): ...\n",
        4,
        "**OPTIONS",
        id="unpacked options",
    ),
    pytest.param(
        "CPUS = 1\nCPUS = 2\n@workflow.with_options(requests=ResourceRequest(cpu=CPUS))\nasync def j(ctx): ...\n",
        5,
        "requests=ResourceRequest(cpu=CPUS)",
        id="a name bound twice",
    ),
    pytest.param(
        "import os\n@workflow.with_options(name=os.environ['NAME'])\nasync def j(ctx): ...\n",
        4,
        "name=os.environ['NAME']",
        id="an expression",
    ),
    pytest.param(
        "async def j(ctx): ...\nj = workflow(j)\n",
        4,
        "workflow",
        id="workflow called outside a decorator",
    ),
    pytest.param(
        "if True:\n    @workflow\n    async def j(ctx): ...\n",
        4,
        "workflow",
        id="a decorator that is not at module level",
    ),
]


@pytest.mark.parametrize(("body", "line", "text"), NOT_STATIC)
def test_values_that_need_the_file_to_run(body, line, text):
    with pytest.raises(NotStatic) as caught:
        read(body)
    assert (caught.value.line, caught.value.text) == (line, text)


INVALID = [
    pytest.param("requests=ResourceRequest(memory='8GB')", ValueError, "memory: '8GB' is not a quantity"),
    pytest.param("requests=ResourceRequest(cpu=-1)", ValueError, "cpu must be >= 0"),
    pytest.param("requests=ResourceRequest(packages='torch')", TypeError, "packages must be a list"),
    pytest.param("requests={'cpu': 4}", TypeError, "requests must be a ResourceRequest"),
    pytest.param("affinity={'bad key': 'x'}", ValueError, "affinity"),
    pytest.param("name='has space'", ValueError, "name 'has space' is invalid"),
    pytest.param("max_attempts=0", ValueError, "max_attempts must be between 1 and 100"),
    pytest.param("requests=ResourceRequest(gpu=1, gpu_memory='20GB')", ValueError, "gpu_memory: '20GB'"),
    pytest.param("requests=ResourceRequest(gpu_memory='20Gi')", ValueError, "needs gpu >= 1"),
    pytest.param("prority=3", TypeError, "unexpected keyword argument 'prority'"),
]


@pytest.mark.parametrize(("options", "error", "fragment"), INVALID)
def test_invalid_values_fail_as_the_real_decorator_does(options, error, fragment):
    body = f"@workflow.with_options({options})\nasync def j(ctx): ...\n"
    with pytest.raises(error) as caught:
        read(body)
    message = str(caught.value)
    assert message.startswith("wf.py:3: ")
    assert fragment in message
    # The same words as running the file would give.
    with pytest.raises(error) as real:
        exec(compile(HEADER + body, "wf.py", "exec"), {})
    assert message.removeprefix("wf.py:3: ") == str(real.value).replace(
        "_WorkflowDecorator.with_options()", "workflow.with_options()"
    )


def test_invalid_function_name_is_refused_like_the_decorator():
    with pytest.raises(ValueError, match="^wf.py:5: function name 'λ' is invalid"):
        read("@workflow\ndef ok(ctx): ...\n@workflow.with_options()\ndef λ(ctx): ...\n")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            "from flux import workflow\n@workflow\nasync def f(ctx):\n    return (1,\n",
            "wf.py:4:12: '(' was never closed\n    return (1,\n           ^",
            id="unclosed bracket",
        ),
        pytest.param(
            "from flux import workflow\n@workflow\nasync def f(ctx)\n    return 1\n",
            "wf.py:3:17: expected ':'\n    async def f(ctx)\n                    ^",
            id="missing colon",
        ),
    ],
)
def test_syntax_error_is_one_message_with_file_line_and_the_line(source, expected):
    with pytest.raises(SourceError) as caught:
        read_declarations(source, "wf.py")
    assert str(caught.value) == expected
    assert isinstance(caught.value, ValueError)  # the CLI prints it as one error line, no traceback


@pytest.mark.parametrize(
    "path", [ROOT / "examples" / "hello.py", ROOT / "examples" / "resource_workflows.py", ROOT / "tests" /
             "integration" / "workflows.py"], ids=lambda p: p.name,
)  # fmt: skip
def test_reading_agrees_with_importing_on_the_shipped_files(path):
    source = path.read_text()
    read_back = sorted(read_declarations(source, str(path)), key=lambda d: d.name)
    imported = sorted(_import(path, source, "test"), key=lambda d: d.name)
    assert read_back == imported
    assert read_back


def test_loader_reads_without_importing(tmp_path):
    path = tmp_path / "torchy.py"
    path.write_text(HEADER + "import torch_not_installed_xyz\n@workflow\nasync def train(ctx): ...\n")
    loaded = load_workflow_file(path)
    assert [d.name for d in loaded.workflows] == ["train"] and loaded.notes == ()


def test_loader_imports_for_a_value_it_cannot_read_and_says_so(tmp_path):
    path = tmp_path / "dynamic.py"
    path.write_text(
        HEADER + "def cores():\n    return 2\n\n"
        "@workflow.with_options(requests=ResourceRequest(cpu=cores()))\nasync def job(ctx): ...\n"
    )
    loaded = load_workflow_file(path, allow_import=True)
    assert [(d.name, d.requests) for d in loaded.workflows] == [("job", ResourceRequest(cpu=2))]
    assert loaded.notes == (
        f"note: {path}:6: requests=ResourceRequest(cpu=cores()) holds cores(), which is not a literal; "
        "importing the file to read it",
    )


def test_loader_import_failure_is_one_message_naming_why_it_imported(tmp_path):
    path = tmp_path / "dynamic.py"
    path.write_text(
        HEADER + "import torch_not_installed_xyz\n"
        "@workflow.with_options(requests=torch_not_installed_xyz.requests())\nasync def job(ctx): ...\n"
    )
    with pytest.raises(ValueError) as caught:
        load_workflow_file(path, allow_import=True)
    assert str(caught.value) == (
        f"importing {path} failed: ModuleNotFoundError: No module named 'torch_not_installed_xyz'\n"
        f"({path}:4: requests=torch_not_installed_xyz.requests() is not a literal; importing the file to read it)"
    )


def test_loader_imports_when_no_flux_decorator_is_visible(tmp_path):
    (tmp_path / "mylib_reexport_xyz.py").write_text("from flux import workflow\n")
    path = tmp_path / "indirect.py"
    path.write_text("from mylib_reexport_xyz import workflow\n@workflow\nasync def job(ctx): ...\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        loaded = load_workflow_file(path, allow_import=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mylib_reexport_xyz", None)
    assert [d.name for d in loaded.workflows] == ["job"]
    assert loaded.notes == (
        f"note: {path}: no @workflow decorator from flux found by reading; importing the file",
    )


# ---------------------------------------------------------------------- registering never runs the file


RUNS_CODE = (
    HEADER + "import pathlib\n"
    "CPUS = int(pathlib.Path(__file__).with_name('ran').write_text('ran') and '2')\n"
    "@workflow.with_options(requests=ResourceRequest(cpu=CPUS))\nasync def job(ctx): ...\n"
)


def test_a_value_it_cannot_read_is_an_error_naming_file_line_and_argument_and_nothing_runs(tmp_path):
    path = tmp_path / "dynamic.py"
    path.write_text(RUNS_CODE)
    with pytest.raises(NeedsImport) as caught:
        load_workflow_file(path)
    message = str(caught.value)
    # The line of the value that needs running (CPUS's), and the argument that holds it.
    assert message.startswith(f"{path}:4: requests=ResourceRequest(cpu=CPUS) holds int(pathlib.")
    assert "--allow-import" in message
    assert not (tmp_path / "ran").exists()  # the file's code did not run
    # Asked for: imported, and says why.
    loaded = load_workflow_file(path, allow_import=True)
    assert (tmp_path / "ran").read_text() == "ran"
    assert [d.requests for d in loaded.workflows] == [ResourceRequest(cpu=2)]
    assert loaded.notes and loaded.notes[0].startswith(f"note: {path}:4: ")


def test_no_visible_flux_decorator_is_an_error_without_allow_import(tmp_path):
    path = tmp_path / "indirect.py"
    path.write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\n"
        "from mylib_reexport_xyz import workflow\n@workflow\nasync def job(ctx): ...\n"
    )
    with pytest.raises(NeedsImport) as caught:
        load_workflow_file(path)
    assert str(caught.value).startswith(f"{path}: no @workflow decorator from flux found by reading")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "shadow",
    [
        pytest.param("if True:\n    from mylib import workflow\n", id="an import in an if block"),
        pytest.param("try:\n    from mylib import workflow\nexcept ImportError:\n    pass\n", id="in try"),
        pytest.param("from mylib import *\n", id="a star import from another module"),
        pytest.param(
            "def rebind():\n    global workflow\n    workflow = None\n", id="a global in a function"
        ),
        pytest.param("for workflow in []:\n    pass\n", id="a loop variable"),
        pytest.param("with open('x') as workflow:\n    pass\n", id="a with target"),
    ],
)
def test_a_shadowed_workflow_name_is_not_trusted(shadow, tmp_path):
    source = HEADER + shadow + "@workflow\nasync def job(ctx): ...\n"
    assert read_declarations(source, "wf.py") == []
    path = tmp_path / "wf.py"
    path.write_text(source)
    with pytest.raises(NeedsImport):
        load_workflow_file(path)


def test_importing_flux_twice_still_reads(tmp_path):
    source = "import flux\nimport flux.workflow\n@flux.workflow\nasync def job(ctx): ...\n"
    assert [d.name for d in read_declarations(source, "wf.py")] == ["job"]
