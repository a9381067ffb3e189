"""``make chaos``: CHAOS_SECONDS (default 600), CHAOS_SEED (default random, printed), CHAOS_STORE.

CHAOS_STORE is ``sqlite`` (default), ``postgres`` or ``both`` (SQLite, then
PostgreSQL). Each run writes bench/results/chaos-<store>.json and prints its
path; the exit status is 1 when any run found a violation.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

from bench.chaos.run import STORES, run
from bench.common import write

CHOICES = (*STORES, "both")


def _setting(name: str, default: str, parse, form: str):  # type: ignore[no-untyped-def]
    text = os.environ.get(name, "").strip() or default
    try:
        return parse(text)
    except ValueError:
        sys.exit(f"error: {name} must be {form}; got {text!r}")


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def _store(text: str) -> str:
    if text not in CHOICES:
        raise ValueError(text)
    return text


def main() -> int:
    seconds = _setting("CHAOS_SECONDS", "600", _positive, "a number of seconds above 0, e.g. 600")
    seed = _setting("CHAOS_SEED", str(random.SystemRandom().randrange(2**31)), int, "an integer, e.g. 1234")
    store = _setting("CHAOS_STORE", "sqlite", _store, f"one of {', '.join(CHOICES)}")
    print(f"chaos: seed {seed}, {seconds:g} s, store {store} (CHAOS_SEED={seed} reproduces the fault choices)",
          flush=True)  # fmt: skip
    failed = False
    for each in STORES if store == "both" else (store,):
        with tempfile.TemporaryDirectory(prefix=f"flux-chaos-{each}-") as workdir:
            document = run(seconds, seed, each, Path(workdir))
            if document["violations"]:
                # The servers' logs are the rest of the trail: keep them where the result says.
                kept = Path(tempfile.mkdtemp(prefix=f"flux-chaos-{each}-kept-"))
                for log in Path(workdir).glob("*.log"):
                    (kept / log.name).write_bytes(log.read_bytes())
                document["trail"]["workdir"] = str(kept)  # type: ignore[index]
        path = write(f"chaos-{each}", document)
        print(f"chaos: {'VIOLATIONS' if document['violations'] else 'clean'}; result in {path}", flush=True)
        failed = failed or bool(document["violations"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
