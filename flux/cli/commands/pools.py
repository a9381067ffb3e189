"""``flux pool apply FILE``, ``flux pool list [--json]``, ``flux pool show NAME [--json]``.

A pools file is YAML (when PyYAML is installed) or JSON::

    pools:
      - name: a100
        labels: {gpu: a100}
        resources: {cpu: 8, memory: 64Gi, gpu: 1, gpu_memory: 80Gi, disk: 100Gi}
        runtime: python 3.12
        packages: {torch: "2.4.0"}
        min: 0
        max: 10

It is validated here first (every error names its field), then again by the server.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from flux.cli.support import ServiceCalls
from flux.domain.quantity import format_bytes
from flux.errors import InvalidArgument
from flux.matching.pools import parse_pools


def read_pools_file(path: str) -> Any:
    """The document in ``path``: JSON, or YAML where PyYAML is installed."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read pools file {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as json_error:
        try:
            import yaml
        except ImportError:
            raise InvalidArgument(
                f"{path} is not JSON ({json_error}); for YAML install PyYAML (pip install pyyaml)"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidArgument(f"{path} is neither JSON nor YAML: {exc}") from None


def _pools(args: argparse.Namespace) -> ServiceCalls:
    from flux.v1 import pools_pb2_grpc

    return ServiceCalls(args, pools_pb2_grpc.PoolServiceStub)


def apply_pools(args: argparse.Namespace) -> int:
    from flux.server.pool_convert import spec_to_proto
    from flux.v1 import pools_pb2

    try:
        specs = parse_pools(read_pools_file(args.file))
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{args.file}: {exc}") from None
    with _pools(args) as pools:
        answer = pools.call(
            "ApplyPools", pools_pb2.ApplyPoolsRequest(pools=[spec_to_proto(s) for s in specs])
        )
    for pool in answer.pools:
        print(f"pool {pool.spec.name} applied ({pool.workers} workers, demand {pool.demand_workers})")
    return 0


def list_pools(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.v1 import pools_pb2

    with _pools(args) as pools:
        answer = pools.call("ListPools", pools_pb2.ListPoolsRequest())
    if args.json:
        print(json.dumps({"pools": [pool_json(p) for p in answer.pools]}))
        return 0
    if not answer.pools:
        print("no pools: declare one with flux pool apply FILE, or start a worker with --pool NAME")
        return 0
    header = (
        "NAME",
        "SOURCE",
        "WORKERS",
        "BUSY",
        "PENDING",
        "RUNNING",
        "DEMAND",
        "MIN",
        "MAX",
        "WORKER SHAPE",
    )
    rows = [
        (
            p.spec.name,
            p.spec.source,
            str(p.workers),
            str(p.busy_workers),
            str(p.pending),
            str(p.running),
            str(p.demand_workers),
            str(p.spec.min_workers),
            str(p.spec.max_workers or "-"),
            _shape(p.spec),
        )
        for p in answer.pools
    ]
    print(table(header, rows, right=frozenset(range(2, 9))))
    return 0


def show_pool(args: argparse.Namespace) -> int:
    from flux.v1 import pools_pb2

    with _pools(args) as pools:
        pool = pools.call("GetPool", pools_pb2.GetPoolRequest(name=args.name)).pool
    if args.json:
        print(json.dumps(pool_json(pool)))
        return 0
    spec = pool.spec
    labels = ", ".join(f"{k}={v}" for k, v in sorted(spec.labels.items())) or "-"
    packages = ", ".join(f"{k}=={v}" for k, v in sorted(spec.packages.items())) or "-"
    lines = [
        f"pool {spec.name} ({spec.source})",
        f"  worker shape  {_shape(spec)}",
        f"  labels        {labels}",
        f"  runtime       {spec.runtime or 'python'}",
        f"  packages      {packages}",
        f"  capacity      {spec.capacity} executions per worker",
        f"  min / max     {spec.min_workers} / {spec.max_workers or 'no maximum'}",
        f"  workers       {pool.workers} connected, {pool.busy_workers} busy",
        f"  work          {pool.pending} pending, {pool.running} running",
        f"  demand        {pool.demand_workers} workers (needed {pool.needed_workers}"
        f"{', active' if pool.active else ', idle'})",
    ]
    print("\n".join(lines))
    return 0


# In --json, as DESIGN §8 says of JSON: byte quantities are strings ("8Gi", exact, or the bytes
# where no unit divides them), counts are numbers. The proto3 JSON mapping alone would print
# every int64 as a string and every int32 as a number, so `cpu` and `pending` were "8" beside
# `gpu` and `workers` as 8.
POOL_BYTES = ("memory", "gpu_memory", "disk")
SPEC_COUNTS = ("cpu", "gpu", "capacity", "min_workers", "max_workers")
POOL_COUNTS = ("workers", "busy_workers", "pending", "running", "needed_workers", "demand_workers")


def pool_json(pool: Any) -> dict[str, Any]:
    """One pool as ``flux pool list|show --json`` prints it."""
    from flux.domain.tenant import show_amount

    found = json_format.MessageToDict(
        pool, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    spec = found["spec"]
    for key in POOL_BYTES:
        spec[key] = str(show_amount("memory", int(spec[key])))
    for key in SPEC_COUNTS:
        spec[key] = int(spec[key])
    for key in POOL_COUNTS:
        found[key] = int(found[key])
    return found


def _shape(spec: Any) -> str:
    parts = [f"{spec.cpu} cores", format_bytes(spec.memory)]
    if spec.gpu:
        vram = f" ({format_bytes(spec.gpu_memory)})" if spec.gpu_memory else ""
        parts.append(f"{spec.gpu} GPU{'s' if spec.gpu != 1 else ''}{vram}")
    if spec.disk:
        parts.append(f"{format_bytes(spec.disk)} disk")
    return ", ".join(parts)
