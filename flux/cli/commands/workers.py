"""``flux workers list`` (the fleet) and ``flux worker pause|resume|forget NAME`` (one worker)."""

from __future__ import annotations

import argparse
import json
import time

from flux.cli.render.workers import worker_dict, workers_text
from flux.cli.support import connect
from flux.cli.tables import terminal_width


def list_workers(args: argparse.Namespace) -> int:
    with connect(args) as client:
        response = client.workers()
    if args.json:
        print(json.dumps({"workers": [worker_dict(w) for w in response.workers]}))
    else:
        print(workers_text(response.workers, int(time.time() * 1000), terminal_width()))
    return 0


def forget_worker(args: argparse.Namespace) -> int:
    with connect(args) as client:
        response = client.forget_worker(args.name)
    print(f"forgot worker {args.name}; {response.requeued} executions requeued")
    return 0


def pause_or_resume(args: argparse.Namespace) -> int:
    with connect(args) as client:
        worker = client.pause_worker(args.name) if args.paused else client.resume_worker(args.name)
    if args.json:
        print(json.dumps(worker_dict(worker)))
    elif args.paused:
        print(
            f"worker {worker.name} paused: it keeps its {worker.active_executions} running "
            "execution(s) and takes no new ones until 'flux worker resume'"
        )
    else:
        print(f"worker {worker.name} resumed: it takes new executions again")
    return 0
