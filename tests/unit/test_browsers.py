"""The pure parts of gateway.browser.browsers: Host names, the headers that need a preflight, framing headers."""

from __future__ import annotations

import pytest

from gateway.browser.browsers import _preflighted, _unframeable, allowed_hosts, host_name


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("localhost", "localhost"),
        ("LOCALHOST:80", "localhost"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("flux.example.com.", "flux.example.com"),
        ("evil.example:8080", "evil.example"),
        ("", ""),
    ],
)
def test_host_name(header: str, name: str) -> None:
    assert host_name(header) == name


def test_allowed_hosts() -> None:
    assert allowed_hosts("127.0.0.1", True, ["Flux.Test:443"]) == (
        "127.0.0.1",
        "localhost",
        "::1",
        "flux.test",
    )
    assert allowed_hosts("10.0.0.5", False, ["flux.test"]) == ("10.0.0.5", "flux.test")
    assert allowed_hosts("", False, []) == ()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param([], False, id="nothing"),
        pytest.param(
            [(b"content-type", b"text/plain;charset=UTF-8")], False, id="text/plain (no-cors fetch)"
        ),
        pytest.param([(b"content-type", b"application/x-www-form-urlencoded")], False, id="a form"),
        pytest.param([(b"content-type", b"multipart/form-data; boundary=x")], False, id="a multipart form"),
        pytest.param([(b"authorization", b"")], False, id="an empty authorization"),
        pytest.param([(b"content-type", b"application/json")], True, id="JSON"),
        pytest.param([(b"content-type", b"Application/JSON; charset=utf-8")], True, id="JSON, any case"),
        pytest.param([(b"content-type", b"application/merge-patch+json")], True, id="a +json type"),
        pytest.param([(b"authorization", b"Bearer x")], True, id="authorization"),
        pytest.param([(b"x-flux-session", b"s")], True, id="the session header"),
        pytest.param([(b"x-flux-request", b"1")], True, id="the request header"),
    ],
)
def test_what_a_cross_site_page_cannot_send(headers: list[tuple[bytes, bytes]], expected: bool) -> None:
    assert _preflighted(headers) is expected


def test_framing_headers_are_added_once() -> None:
    plain = _unframeable([(b"content-type", b"application/json")])
    assert plain == [
        (b"content-type", b"application/json"),
        (b"content-security-policy", b"frame-ancestors 'none'"),
        (b"x-frame-options", b"DENY"),
    ]
    policy = dict(_unframeable([(b"content-security-policy", b"default-src 'self';")]))
    assert policy[b"content-security-policy"] == b"default-src 'self'; frame-ancestors 'none'"
    already = b"default-src 'self'; frame-ancestors 'none'"
    kept = _unframeable([(b"content-security-policy", already), (b"x-frame-options", b"SAMEORIGIN")])
    assert kept == [(b"content-security-policy", already), (b"x-frame-options", b"DENY")]
