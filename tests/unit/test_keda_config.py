"""Issue 40: the KEDA port has no bearer token, so beyond loopback it needs client certificates
(``--keda-client-ca``) or an explicit ``--keda-insecure``; and its stream caps are counted per peer host."""

from __future__ import annotations

import pytest

from flux.cli.parser import build_parser
from flux.errors import ResourceExhausted
from flux.server.keda_streams import StreamLimits, peer_host
from flux.server.serve import ServerConfig, keda_refusal

TLS = ("cert.pem", "key.pem")


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        (ServerConfig(host="127.0.0.1", keda_port=9090), ""),
        (ServerConfig(host="0.0.0.0"), ""),  # no KEDA port: nothing to refuse
        (ServerConfig(host="0.0.0.0", keda_port=9090), "--keda-client-ca CA.pem"),
        (ServerConfig(host="10.0.0.5", keda_port=9090), "or --keda-insecure"),
        (ServerConfig(host="0.0.0.0", keda_port=9090, keda_insecure=True), ""),
        (ServerConfig(host="0.0.0.0", keda_port=9090, tls=TLS, keda_client_ca="ca.pem"), ""),
        (ServerConfig(host="0.0.0.0", keda_port=9090, keda_client_ca="ca.pem"), "needs --tls-cert"),
        (
            ServerConfig(
                host="0.0.0.0", keda_port=9090, tls=TLS, keda_client_ca="ca.pem", keda_insecure=True
            ),
            "give one of them",
        ),
    ],
    ids=[
        "loopback",
        "no port",
        "any address",
        "one address",
        "insecure",
        "client ca",
        "ca without tls",
        "both",
    ],
)
def test_the_keda_port_beyond_loopback_needs_a_client_ca_or_keda_insecure(
    config: ServerConfig, refused: str
) -> None:
    answer = keda_refusal(config)
    assert (refused in answer and answer) if refused else answer == ""


def test_the_cli_refuses_before_creating_anything(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["start", "server", "--host", "0.0.0.0", "--keda-port", "0"])
    assert args.run(args) == 2
    assert "--keda-insecure" in capsys.readouterr().err
    assert not (tmp_path / ".flux").exists()


def test_the_flags_parse_with_their_defaults() -> None:
    args = build_parser().parse_args(["start", "server"])
    assert (args.keda_insecure, args.keda_max_streams, args.keda_max_streams_per_peer) == (False, 256, 16)
    args = build_parser().parse_args(
        [
            "start",
            "server",
            "--keda-insecure",
            "--keda-max-streams",
            "4000",
            "--keda-max-streams-per-peer",
            "9",
        ]
    )
    assert (args.keda_insecure, args.keda_max_streams, args.keda_max_streams_per_peer) == (True, 4000, 9)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["start", "server", "--keda-max-streams", "0"])


@pytest.mark.parametrize(
    ("peer", "host"),
    [("ipv4:10.0.0.7:51234", "10.0.0.7"), ("ipv6:[::1]:5", "::1"), ("unix:/tmp/s", "unix:/tmp/s")],
)
def test_peer_host_drops_the_port(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_limits_count_per_host_and_release_once() -> None:
    limits = StreamLimits(max_streams=3, max_per_peer=2)
    a = [limits.admit("ipv4:10.0.0.1:1"), limits.admit("ipv4:10.0.0.1:2")]
    with pytest.raises(ResourceExhausted, match="10.0.0.1 holds 2 .*--keda-max-streams-per-peer 2"):
        limits.admit("ipv4:10.0.0.1:3")
    limits.admit("ipv4:10.0.0.2:1")
    with pytest.raises(ResourceExhausted, match="--keda-max-streams 3"):
        limits.admit("ipv4:10.0.0.3:1")
    a[0]()
    a[0]()  # twice is once
    assert (limits.open, limits.by_peer) == (2, {"10.0.0.1": 1, "10.0.0.2": 1})
