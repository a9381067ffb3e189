"""``flux batch show|wait|cancel ID``: a batch's progress (``client.batches``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flux.cli.parser_batches import EXIT_TIMED_OUT
from flux.cli.support import connect

EXIT_FAILED = 1


def batch_to_dict(b: Any) -> dict[str, Any]:
    return {
        "batch_id": b.batch_id, "workflow": b.workflow_name, "tenant": b.tenant,
        "max_concurrent": b.max_concurrent or None, "total": b.total, "created": b.created,
        "running": b.running, "completed": b.completed, "failed": b.failed, "cancelled": b.cancelled,
        "finished": b.finished, "created_at_ms": b.created_at_ms, "cancelled_at_ms": b.cancelled_at_ms or None,
    }  # fmt: skip


def render(b: Any) -> str:
    """``batch b-… shard: 40/100 finished (completed 38, failed 1, cancelled 1); running 4 (max 4), created 56``."""
    done = b.completed + b.failed + b.cancelled
    most = f" (max {b.max_concurrent})" if b.max_concurrent else ""
    cancelled = ", batch cancelled" if b.cancelled_at_ms else ""
    return (
        f"batch {b.batch_id} {b.workflow_name}: {done}/{b.total} finished (completed {b.completed}, "
        f"failed {b.failed}, cancelled {b.cancelled}); running {b.running}{most}, created {b.created}{cancelled}"
    )


def _print(args: argparse.Namespace, b: Any) -> None:
    print(json.dumps(batch_to_dict(b)) if args.json else render(b))


def show_batch(args: argparse.Namespace) -> int:
    with connect(args) as client:
        _print(args, client.batches.get(args.batch_id))
    return 0


def wait_batch(args: argparse.Namespace) -> int:
    from flux.client import BatchWaitTimedOut

    with connect(args) as client:
        try:
            final = client.batches.wait(args.batch_id, args.timeout)
        except BatchWaitTimedOut as exc:
            print(f"error: {exc}", file=sys.stderr)
            if exc.batch is not None:
                _print(args, exc.batch)
            return EXIT_TIMED_OUT
    _print(args, final)
    return 0 if final.completed == final.total else EXIT_FAILED


def cancel_batch(args: argparse.Namespace) -> int:
    with connect(args) as client:
        _print(args, client.batches.cancel(args.batch_id))
    return 0
