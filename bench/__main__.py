"""``make bench``: run every benchmark and write JSON results under bench/results/."""

from __future__ import annotations

import argparse

from bench import (
    attacks,
    dashboard,
    dispatch,
    fleet,
    gangs,
    graphs,
    graphs_arrays,
    keda_flood,
    limits,
    limits_flow,
    loaded,
    matching,
    memory,
    peers,
    placement,
    pools,
    prefetch,
    rate_live,
    reclaim,
    replicas,
    schedules,
    starvation,
    submit,
    tenants,
    timers,
    tracing,
)

BENCHES = {
    "matching": matching.main,
    "dispatch": dispatch.main,
    "replicas": replicas.main,
    "memory": memory.main,
    "loaded": loaded.main,
    "dashboard": dashboard.main,
    "attacks": attacks.main,
    "starvation": starvation.main,
    "fleet": fleet.main,
    "peers": peers.main,
    "prefetch": prefetch.main,
    "limits": limits.main,
    "limits-flow": limits_flow.main,
    "pools": pools.main,
    "tenants": tenants.main,
    "reclaim": reclaim.main,
    "tracing": tracing.main,
    "keda-flood": keda_flood.main,
    "timers": timers.main,
    "gangs": gangs.main,
    "graphs": graphs.main,
    "rate-live": rate_live.main,
    "arrays": graphs_arrays.main,
    "placement": placement.main,
    "schedules": schedules.main,
    "submit": submit.main,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", choices=[[], *BENCHES], help="benchmarks to run (default: all)")
    names = parser.parse_args().names or list(BENCHES)
    for name in names:
        BENCHES[name]()


if __name__ == "__main__":
    main()
