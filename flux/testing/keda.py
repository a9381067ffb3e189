"""A KEDA emulator for tests and the bench: KEDA's call pattern against a real ``--keda-port``.

What KEDA does with an ``external`` / ``external-push`` trigger, and what is done here:

- ``GetMetricSpec`` once, when the ScaledObject is set up;
- every polling interval (``tick``): ``GetMetrics``, then ``IsActive``;
- ``StreamIsActive`` held open in a thread, reconnecting with backoff when
  it drops; every answer is recorded (``pushes``);
- replicas as the HPA computes them: ``ceil(metric / target)`` within
  ``min_replicas``/``max_replicas`` while active; when inactive, the scale
  target goes to ``min_replicas`` (0) only after ``cooldown`` inactive polls
  (KEDA's cooldownPeriod, here counted in polls so no test depends on time).

``scale`` is the Deployment: a callback that makes that many replicas exist.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from flux.keda import externalscaler_pb2 as pb
from flux.keda import externalscaler_pb2_grpc as pb_grpc


@dataclass
class Push:
    result: bool
    at: float  # time.monotonic() when it arrived


@dataclass
class KedaEmulator:
    channel: grpc.Channel
    pool: str
    scale: Callable[[int], None]
    min_replicas: int = 0
    max_replicas: int = 10
    cooldown: int = 3  # inactive polls before scaling to min_replicas
    name: str = "flux-pool"
    namespace: str = "default"
    replicas: int = 0
    pushes: list[Push] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    _inactive_polls: int = 0
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _pushed: threading.Condition = field(default_factory=threading.Condition)
    _stream: grpc.Future | None = None  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.ref = pb.ScaledObjectRef(
            name=self.name, namespace=self.namespace, scalerMetadata={"pool": self.pool}
        )

    # ----------------------------------------------------------------- setup

    def setup(self) -> pb.MetricSpec:
        """GetMetricSpec, then the push stream; returns the one metric spec."""
        self.calls.append("GetMetricSpec")
        spec = self.stub.GetMetricSpec(self.ref, timeout=10)
        assert len(spec.metricSpecs) == 1, spec
        self.spec = spec.metricSpecs[0]
        self._thread = threading.Thread(
            target=self._stream_loop, name=f"keda-stream-{self.pool}", daemon=True
        )
        self._thread.start()
        return self.spec

    def close(self) -> None:
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _stream_loop(self) -> None:
        delay = 0.05
        while not self._stopping.is_set():
            try:
                self.calls.append("StreamIsActive")
                stream = self._stream = self.stub.StreamIsActive(self.ref)
                for answer in stream:
                    delay = 0.05
                    with self._pushed:
                        self.pushes.append(Push(answer.result, time.monotonic()))
                        self._pushed.notify_all()
            except (grpc.RpcError, ValueError):  # ValueError: the channel was closed under it
                pass
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, 2.0)  # KEDA reconnects with backoff

    def wait_push(self, result: bool, after: int = 0, timeout: float = 15.0) -> Push:
        """The first push of ``result`` at index >= ``after``; fails past ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._pushed:
            while True:
                for push in self.pushes[after:]:
                    if push.result is result:
                        return push
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no StreamIsActive push of {result} for pool {self.pool}: {self.pushes}"
                    )
                self._pushed.wait(left)

    # ----------------------------------------------------------------- polling

    def poll(self) -> tuple[float, bool]:
        """One polling interval's calls: (metric value, active)."""
        self.calls.append("GetMetrics")
        metrics = self.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=self.spec.metricName), timeout=10
        )
        (value,) = metrics.metricValues
        assert value.metricName == self.spec.metricName
        self.calls.append("IsActive")
        active = self.stub.IsActive(self.ref, timeout=10).result
        return value.metricValueFloat, active

    def desired(self, metric: float, active: bool) -> int:
        """The HPA's answer for one poll, with KEDA's activation and cooldown around it."""
        if active:
            self._inactive_polls = 0
            target = self.spec.targetSizeFloat or float(self.spec.targetSize)
            return max(self.min_replicas, 1, min(self.max_replicas, math.ceil(metric / target)))
        self._inactive_polls += 1
        if self._inactive_polls >= self.cooldown:
            return self.min_replicas
        return self.replicas

    def tick(self) -> int:
        """One polling interval: poll, compute replicas, scale; returns the replicas now."""
        metric, active = self.poll()
        wanted = self.desired(metric, active)
        if wanted != self.replicas:
            self.scale(wanted)
            self.replicas = wanted
        return self.replicas
