"""``flux status``: the fleet and the pending queue at a glance."""

from __future__ import annotations

import argparse
import json

from flux.cli.render.status import status_dict, status_text
from flux.cli.support import connect
from flux.cli.tables import terminal_width


def cluster_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        status = client.status()
    print(json.dumps(status_dict(status)) if args.json else status_text(status, terminal_width()))
    return 0
