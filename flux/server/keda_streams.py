"""How many ``StreamIsActive`` streams the KEDA port holds: per peer and in all.

The port answers without a bearer token (KEDA authenticates by client
certificate, when ``--keda-client-ca`` is set), so what one caller can hold
open is capped here: KEDA's operator opens one stream per ScaledObject, from
one pod, so a peer far past a handful of pools is not KEDA. The peer is the
address from ``context.peer()`` without its port: one host's connections
count together, however many it opens.

Pure bookkeeping, no grpc: ``admit`` is synchronous, so two streams that
arrive in one event-loop turn cannot both take the last place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flux import defaults
from flux.errors import ResourceExhausted


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.7:51234`` -> ``10.0.0.7``; ``ipv6:[::1]:5`` -> ``::1``; others as given."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6") or not address:
        return peer
    host = address.rsplit(":", 1)[0]
    return host.removeprefix("[").removesuffix("]")


@dataclass
class StreamLimits:
    max_streams: int = defaults.KEDA_MAX_STREAMS
    max_per_peer: int = defaults.KEDA_MAX_STREAMS_PER_PEER
    open: int = 0
    by_peer: dict[str, int] = field(default_factory=dict)

    def admit(self, peer: str) -> Callable[[], None]:
        """Count one more stream from ``peer``, or refuse it; returns the release (call it once)."""
        host = peer_host(peer)
        if self.open >= self.max_streams:
            raise ResourceExhausted(
                f"the KEDA port holds {self.open} StreamIsActive streams, its cap "
                f"(--keda-max-streams {self.max_streams}); KEDA opens one per ScaledObject: "
                "raise --keda-max-streams for more ScaledObjects"
            )
        mine = self.by_peer.get(host, 0)
        if mine >= self.max_per_peer:
            raise ResourceExhausted(
                f"{host} holds {mine} StreamIsActive streams, the cap per peer "
                f"(--keda-max-streams-per-peer {self.max_per_peer}); KEDA opens one per ScaledObject: "
                "raise --keda-max-streams-per-peer for more ScaledObjects"
            )
        self.open += 1
        self.by_peer[host] = mine + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.open -= 1
            left = self.by_peer[host] - 1
            if left:
                self.by_peer[host] = left
            else:
                del self.by_peer[host]

        return release
