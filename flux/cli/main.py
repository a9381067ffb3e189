"""The ``flux`` command's entry point: parse, set up logs and tracing, run the command's handler.

Exit status: 0 on success; 1 when the command was refused or the execution
failed or was cancelled; 2 for a usage error; 3 when ``run --wait --timeout``
gave up before the execution finished (it goes on; the message names it);
130 when Ctrl-C stopped a wait (the execution is left as it is).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from flux import grpc_io
from flux.cli.parser import build_parser
from flux.cli.support import EXIT_INTERRUPTED, UsageError, error
from flux.errors import FluxError
from flux.observe import logs, tracing


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fmt = getattr(args, "log_format", None) or logs.default_format()
    if fmt not in logs.FORMATS:
        print(f"error: ${logs.ENV} must be one of {', '.join(logs.FORMATS)}; got {fmt!r}", file=sys.stderr)
        return 2
    try:
        logs.configure(args.log_level, fmt)
    except ValueError as exc:  # an unknown --log-level
        print(f"error: --log-level: {exc}", file=sys.stderr)
        return 2
    _warn_token_flags(args)
    # Spans only where OTEL_* settings ask for them (flux/observe/tracing.py); one service name per role,
    # read from the handler's name: `flux start X` runs flux.cli.commands.start.start_X.
    role = getattr(args.run, "__name__", "").removeprefix("start_")
    if role in ("server", "worker"):
        grpc_io.choose()  # before anything imports grpc: tracing's exporter, the handler (grpc_io.py)
    tracing.setup(f"flux-{role}" if role in ("server", "worker", "gateway") else "flux-cli")
    try:
        return int(args.run(args) or 0)
    except FluxError as exc:
        error(str(exc))
        return 1
    except (ValueError, TypeError) as exc:  # e.g. an invalid ResourceRequest in a registered file
        error(str(exc))
        return 1
    except UsageError as exc:
        error(str(exc))
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        tracing.shutdown()


def _warn_token_flags(args: argparse.Namespace) -> None:
    """A token given as a flag is in /proc/<pid>/cmdline, which every local user can read."""
    for flag in ("worker_token", "api_token"):
        if getattr(args, flag, None):
            option = "--" + flag.replace("_", "-")
            env = f"FLUX_{flag.upper()}"
            print(
                f"warning: {option} is visible to other local users in the process list "
                f"(/proc/{os.getpid()}/cmdline); prefer {option}-file PATH or ${env}",
                file=sys.stderr,
                flush=True,
            )
