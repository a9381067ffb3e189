"""The ``flux`` command's parser and its own output lines: help, version, log flags (no processes)."""

from __future__ import annotations

import argparse
import io
import json
import logging
from importlib.metadata import version

import pytest

from flux.cli.parser import build_parser, leaf_parsers
from flux.observe import logs


def _every_action(parser: argparse.ArgumentParser, path: str = "flux"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:  # the subcommands as `--help` lists them
                yield f"{path} {choice.dest}", choice
            for name, sub in action.choices.items():
                yield from _every_action(sub, f"{path} {name}")
        else:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action


def test_every_argument_and_subcommand_has_help() -> None:
    missing = [where for where, action in _every_action(build_parser()) if not action.help]
    assert missing == []


def test_the_run_arguments_say_what_they_take() -> None:
    run = next(p for p in leaf_parsers(build_parser()) if p.prog.endswith("workflow run"))
    text = " ".join(run.format_help().split())
    assert "registered workflow name" in text  # NAME
    assert "the input as JSON" in text and "- reads it from stdin" in text  # INPUT_JSON
    assert "(default: wait forever)" in text  # --timeout


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"flux {version('flux-dispatch')}"


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        pytest.param(["start", "worker", "w1"], "INFO", id="default"),
        pytest.param(["--log-level", "DEBUG", "start", "worker", "w1"], "DEBUG", id="before"),
        pytest.param(["start", "worker", "w1", "--log-level", "DEBUG"], "DEBUG", id="after"),
        pytest.param(["--log-level", "ERROR", "workers", "list", "--log-level", "DEBUG"], "DEBUG", id="both"),
        pytest.param(["--log-level", "WARNING", "status"], "WARNING", id="before a client command"),
    ],
)
def test_log_level_is_taken_before_or_after_the_subcommand(argv: list[str], level: str) -> None:
    assert build_parser().parse_args(argv).log_level == level


def test_every_command_names_a_handler_that_exists() -> None:
    """Handlers load when their command runs (flux/cli/commands/lazy.py): a misspelt one would
    only fail then, so each is loaded here, and named as the command's module defines it."""
    leaves = list(leaf_parsers(build_parser()))
    assert len(leaves) >= 20
    for leaf in leaves:
        run = leaf.get_default("run")
        handler = run.load()
        assert callable(handler) and handler.__name__ == run.__name__, leaf.prog


def test_every_command_takes_log_level() -> None:
    for leaf in leaf_parsers(build_parser()):
        assert "--log-level" in leaf._option_string_actions, leaf.prog


@pytest.fixture
def restore_logging():
    yield
    logs.configure("INFO", "text")


def test_emitted_lines_follow_the_log_format(restore_logging: None) -> None:
    out = io.StringIO()
    logs.configure("INFO", "json", stream=io.StringIO())
    logs.emit("flux server listening on 127.0.0.1:1 (grpc)", out, grpc="127.0.0.1:1")
    line = json.loads(out.getvalue())
    assert line["msg"] == "flux server listening on 127.0.0.1:1 (grpc)" and line["grpc"] == "127.0.0.1:1"
    assert line["level"] == "INFO" and line["ts"].endswith("Z")
    out = io.StringIO()
    logs.configure("INFO", "text", stream=io.StringIO())
    logs.emit("flux server listening on 127.0.0.1:1 (grpc)", out, grpc="127.0.0.1:1")
    assert out.getvalue() == "flux server listening on 127.0.0.1:1 (grpc)\n"


@pytest.mark.parametrize(("level", "httpx_level"), [("INFO", logging.WARNING), ("DEBUG", logging.DEBUG)])
def test_httpx_request_lines_only_at_debug(restore_logging: None, level: str, httpx_level: int) -> None:
    logs.configure(level, "text", stream=io.StringIO())
    assert logging.getLogger("httpx").getEffectiveLevel() == httpx_level


def test_explain_shows_how_many_are_queued_ahead() -> None:
    from flux.cli.render.executions import explanation_dict, explanation_text
    from flux.v1 import control_pb2

    queued = control_pb2.Explanation(
        execution_id="e1", state=control_pb2.EXECUTION_STATE_CREATED, summary="0/1 workers can run it",
        queued_ahead=2, priority=5,
    )  # fmt: skip
    assert explanation_text(queued).splitlines()[1] == (
        "waiting for capacity; priority 5; 2 with the same requirements ahead"
    )
    assert explanation_dict(queued)["queued_ahead"] == 2
    assert explanation_dict(queued)["priority"] == 5
    queued.queued_ahead = 0
    assert explanation_text(queued).splitlines()[1] == "waiting for capacity; priority 5; next in line"
    placed = control_pb2.Explanation(execution_id="e1", state=control_pb2.EXECUTION_STATE_RUNNING)
    assert explanation_dict(placed)["queued_ahead"] is None


def test_dispatch_retention_defaults_to_a_week_and_names_itself_when_bad(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flux import defaults

    parser = build_parser()
    assert parser.parse_args(["start", "server"]).dispatch_retention == defaults.DISPATCH_RETENTION == 604800
    assert parser.parse_args(["start", "server", "--dispatch-retention", "0"]).dispatch_retention == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["start", "server", "--dispatch-retention", "a week"])
    assert "--dispatch-retention must be a number of seconds; got 'a week'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "error"),
    [
        ("--ack-deadline", "0", "--ack-deadline must be > 0 seconds; got 0"),
        ("--ack-deadline", "inf", "--ack-deadline must be > 0 seconds; got inf"),
        ("--grace-period", "nan", "--grace-period must be > 0 seconds; got nan"),
        ("--starvation-after", "-1", "--starvation-after must be >= 0 seconds (0 turns it off); got -1"),
        ("--starvation-after", "inf", "--starvation-after must be >= 0 seconds (0 turns it off); got inf"),
        ("--preemption-grace", "0", "--preemption-grace must be > 0 seconds; got 0"),
        ("--preemption", "no", "argument --preemption: invalid choice: 'no' (choose from 'on', 'off')"),
    ],
)
def test_seconds_are_finite_and_zero_only_where_it_turns_something_off(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, error: str
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["start", "server", flag, value])
    assert error in capsys.readouterr().err
    assert build_parser().parse_args(["start", "server", "--starvation-after", "0"]).starvation_after == 0.0


def test_preemption_is_on_with_a_30_second_grace_unless_told_otherwise() -> None:
    from flux import defaults

    parser = build_parser()
    args = parser.parse_args(["start", "server"])
    assert (args.preemption, args.preemption_grace) == ("on", defaults.PREEMPTION_GRACE) == ("on", 30.0)
    args = parser.parse_args(["start", "server", "--preemption", "off", "--preemption-grace", "5"])
    assert (args.preemption, args.preemption_grace) == ("off", 5.0)
