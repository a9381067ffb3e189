"""The chaos run's schedule invariant: no tick fires twice, none is skipped within its catch-up window.

Pure checks over what the run read back, like flow_invariants.py. The run creates one schedule
(``SCHEDULE``: ``chaos_echo`` every second, ``--overlap allow --catch-up all``) before the faults
and pauses it after them; every whole second between its first and last recorded tick is then
inside the catch-up window (``all``), whatever was killed meanwhile, so each must have exactly one
fired run (``schedule_runs``' rows), and each fired run exactly one execution with the id derived
from its tick (a server killed between its claim and its submission has its run submitted again
by ``repair``, with the same id, 10 s later).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from bench.chaos.invariants import Violation
from flux.domain.schedule import execution_id_for

SCHEDULE = "chaos-tick"
TERMS = {"every": "1s", "overlap": "allow", "catch_up": "all"}


def check(
    runs: Iterable[tuple[float, str, str]], executions: Iterable[str], tenant: str = "default"
) -> list[Violation]:
    """``runs``: (tick, execution id, result) of the schedule; ``executions``: the stored execution
    ids of its runs. A tick missing, a tick or an execution twice, a run without its execution or
    under another id are violations."""
    runs = sorted(runs)
    found: list[Violation] = []
    ticks = Counter(tick for tick, _, _ in runs)
    found += [
        Violation("schedule_twice", f"{SCHEDULE}@{t:.0f}", f"{n} runs") for t, n in ticks.items() if n > 1
    ]
    if runs:
        first, last = int(runs[0][0]), int(runs[-1][0])
        missing = [t for t in range(first, last + 1) if float(t) not in ticks]
        found += [Violation("schedule_skipped", f"{SCHEDULE}@{t}", "no run for this tick") for t in missing]
    stored = Counter(executions)
    found += [Violation("schedule_twice", e, f"{n} executions") for e, n in stored.items() if n > 1]
    for tick, execution_id, result in runs:
        if result != "fired":
            found.append(Violation("schedule_skipped", f"{SCHEDULE}@{tick:.0f}", f"recorded {result}"))
        elif execution_id != execution_id_for(tenant, SCHEDULE, tick):
            found.append(Violation("schedule_id", execution_id, f"not the id of tick {tick:.0f}"))
        elif execution_id not in stored:
            found.append(Violation("schedule_not_stored", execution_id, "fired, never stored"))
    return found
