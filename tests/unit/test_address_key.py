"""Whose connection it is, for the gateway's per-address connection cap (gateway.security.connections)."""

from __future__ import annotations

import pytest

from gateway.security.connections import HttpLimits, address_key


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        pytest.param(("127.0.0.1", 5000), "127.0.0.1", id="IPv4"),
        pytest.param(("2001:db8:1:2:aaaa::1", 5000, 0, 0), "2001:db8:1:2::/64", id="IPv6, by its /64"),
        pytest.param(
            ("2001:db8:1:2:bbbb::9", 5001, 0, 0), "2001:db8:1:2::/64", id="same /64, other host part"
        ),
        pytest.param(("::ffff:10.0.0.7", 1, 0, 0), "10.0.0.7", id="IPv4-mapped IPv6"),
        pytest.param(("fe80::1%eth0", 1, 0, 2), "fe80::/64", id="scoped link-local"),
        pytest.param("/run/flux.sock", "/run/flux.sock", id="not an IP address"),
        pytest.param(None, "", id="unknown"),
    ],
)
def test_address_key(peer: object, key: str) -> None:
    assert address_key(peer) == key


def test_the_per_address_share_defaults_to_half_the_cap_and_never_exceeds_it() -> None:
    assert HttpLimits(max_connections=20).per_address == 10
    assert HttpLimits(max_connections=1).per_address == 1
    assert HttpLimits(max_connections=20, max_connections_per_address=5).per_address == 5
    assert HttpLimits(max_connections=20, max_connections_per_address=50).per_address == 20
