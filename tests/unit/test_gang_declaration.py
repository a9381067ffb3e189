"""Gangs as declared: Gang(size, same, spread), with_options(gang=), run(gang_size=), read statically,
and a gang's record through JSON, protobuf and the stores' rows."""

from __future__ import annotations

import pytest

from flux import Gang, workflow
from flux.client.requests import run_request
from flux.domain.gang import GangRun
from flux.registration.declarations import read_declarations
from flux.workflow import definition_of


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda: Gang(0), ValueError, "Gang.size must be an int between 1 and 1024; got 0"),
        (lambda: Gang(1025), ValueError, "Gang.size"),
        (lambda: Gang("4"), TypeError, "Gang.size must be an int"),
        (lambda: Gang(True), TypeError, "Gang.size"),
        (lambda: Gang(2, same="a b"), ValueError, "Gang.same must be a label key"),
        (lambda: Gang(2, spread=3), TypeError, "Gang.spread must be a label key"),
        (lambda: Gang(2, same="rack", spread="rack"), ValueError, "name the same label 'rack'"),
        (lambda: workflow.with_options(gang=4), TypeError, "gang must be a Gang, e.g. Gang(size=4, same='rack')"),
        (lambda: run_request("w", "null", 0, None, gang_size=0), ValueError, "gang_size must be an int"),
        (lambda: run_request("w", "null", 0, None, gang_size="2"), TypeError, "gang_size must be an int"),
    ],
    ids=["size 0", "size too big", "size str", "size bool", "same bad", "spread int", "same is spread",
         "gang int", "run size 0", "run size str"],
)  # fmt: skip
def test_bad_gangs_name_the_field(build, error: type[Exception], words: str) -> None:
    with pytest.raises(error) as caught:
        build()
    assert words in str(caught.value)


def test_the_decorator_keeps_the_gang_and_a_run_sends_its_size() -> None:
    @workflow.with_options(gang=Gang(size=4, same="rack"))
    def train(ctx):
        return ctx.gang.rank

    definition = definition_of(train)
    assert definition is not None and definition.gang == Gang(4, "rack")
    assert run_request("train", "null", 0, None, gang_size=8).gang_size == 8
    assert not run_request("train", "null", 0, None).HasField("gang_size")


def test_the_static_reader_reads_a_gang_and_refuses_a_bad_one_at_its_line() -> None:
    source = (
        "from flux import Gang, ResourceRequest, workflow\n"
        "@workflow.with_options(requests=ResourceRequest(gpu=8), gang=Gang(size=4, same='rack', spread='host'))\n"
        "def train(ctx):\n"
        "    return 1\n"
    )
    (definition,) = read_declarations(source, "train.py")
    assert definition.gang == Gang(4, "rack", "host")
    with pytest.raises(ValueError, match=r"train.py:2: Gang.size must be an int between 1 and 1024; got 0"):
        read_declarations(source.replace("size=4", "size=0"), "train.py")
    import_flux = "import flux\n@flux.workflow.with_options(gang=flux.Gang(2))\ndef w(ctx):\n    return 1\n"
    assert read_declarations(import_flux, "w.py")[0].gang == Gang(2)


def test_a_gang_round_trips_through_json_and_protobuf() -> None:
    gang = Gang(4, same="rack")
    assert Gang.from_json(gang.to_json()) == gang and Gang.from_json("") is None
    assert Gang.from_proto(gang.to_proto()) == gang
    run = GangRun(2, (("a", "10.0.0.1", (0, 1)), ("b", "10.0.0.2", ())), frozenset({0}), ((1, '"x"'),))
    assert GangRun.from_json(run.to_json()) == run
    members = run.to_proto()
    assert [(m.rank, m.worker, m.address, list(m.gpu_indices), m.claimed, m.completed) for m in members] == [
        (0, "a", "10.0.0.1", [0, 1], True, False), (1, "b", "10.0.0.2", [], False, True),
    ]  # fmt: skip
    info = run.info(1)
    assert (info.rank, info.size, info.leader.worker, info.leader.address, info.is_leader) == (
        1, 2, "a", "10.0.0.1", False,
    )  # fmt: skip


def test_a_pending_announcement_carries_a_gangs_size() -> None:
    from flux.store import notices
    from flux.store.base import PendingRef

    ref = PendingRef("e1", 3, "train", 1, "ml", 0.0, 2, 10.5, 1, False, gang_size=4)
    assert notices.parse_pending(notices.pending_line(ref)) == [ref]
    plain = PendingRef("e2", 4, "train", 1)
    assert notices.pending_line(plain).count("\t") == 3  # no gang: the line older replicas read
    assert notices.parse_pending(notices.pending_line(plain)) == [plain]
