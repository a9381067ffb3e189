"""``make demo``: the pure matcher routing the example workflows over a sample fleet, no server needed.

It declares workflows with the public API, builds a three-worker fleet (one
probed from this machine, two described), and shows where each execution
would go and why the rest wait.
"""

from __future__ import annotations

from flux.domain.quantity import format_bytes
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import PendingQueue, Shape, WorkerView, explain, schedule
from flux.worker.probe import ResourceProbe

GiB = 1024**3


def fleet() -> list[WorkerView]:
    probe = ResourceProbe()
    local = WorkerView("this-machine", probe.sample(), {"role": "dev"}, probe.software())
    trainer = WorkerView(
        "gpu-trainer",
        WorkerResources(
            32,
            30,
            256 * GiB,
            240 * GiB,
            2000 * GiB,
            1500 * GiB,
            gpus=tuple(Gpu(i, f"GPU-{i}", "NVIDIA H200", 141 * GiB, 141 * GiB) for i in range(4)),
        ),
        {"role": "training"},
        WorkerSoftware(
            {"torch": "2.3.1+cu121", "transformers": "4.41.2", "numpy": "1.26.4", "pandas": "2.2.2"}
        ),
    )
    cruncher = WorkerView(
        "cpu-cruncher",
        WorkerResources(8, 8, 32 * GiB, 30 * GiB, 500 * GiB, 400 * GiB),
        {"role": "training"},
        WorkerSoftware({"numpy": "1.26.4", "pandas": "2.2.2"}),
    )
    return [local, trainer, cruncher]


WORK = [
    ("hello", Shape()),
    (
        "data_processing_workflow",
        Shape(
            ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]), {"role": "training"}
        ),
    ),
    (
        "model_training_workflow",
        Shape(ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"])),
    ),
    ("large_training_run", Shape(ResourceRequest(gpu=8, memory="512Gi"))),
]


def main() -> None:
    workers = fleet()
    print("Fleet:")
    for w in workers:
        r = w.resources
        print(
            f"  {w.name:<14} {w.free_cpu}/{r.cpu_total} cores  {format_bytes(w.free_memory)}/{format_bytes(r.memory_total)}"
            f"  {len(r.gpus)} GPUs  labels={dict(w.labels)}"
        )
    queue = PendingQueue()
    for seq, (name, shape) in enumerate(WORK):
        queue.add(name, shape, seq)
    placed = {p.execution_id: p for p in schedule(queue, workers)}
    print("\nDispatch:")
    for name, shape in WORK:
        if name in placed:
            p = placed[name]
            gpus = f" on GPUs {list(p.gpu_indices)}" if p.gpu_indices else ""
            print(f"  {name:<26} -> {p.worker}{gpus}")
        else:
            verdict = explain(shape, workers)
            kind = "infeasible" if verdict.infeasible else "busy"
            print(f"  {name:<26} waits ({kind}): {verdict.summary}")


if __name__ == "__main__":
    main()
