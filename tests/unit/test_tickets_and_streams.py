"""Stream tickets, CORS origins and execution event ids, without a server."""

from __future__ import annotations

import pytest

from flux.errors import InvalidArgument, PermissionDenied, ResourceExhausted, Unauthenticated
from flux.v1 import control_pb2
from gateway.browser.cors import origin
from gateway.clients.events import event_id, format_id, parse_id
from gateway.security import tickets
from gateway.security.tickets import Access, TicketBook


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


ACCESS = Access("Bearer api", None)


def test_a_ticket_opens_its_own_stream_once() -> None:
    book = TicketBook(ttl=30, clock=Clock())
    ticket = book.mint("execution:e1", ACCESS)
    assert book.redeem(ticket, "execution:e1") == ACCESS
    with pytest.raises(Unauthenticated, match="already used"):
        book.redeem(ticket, "execution:e1")


def test_a_wrong_scope_is_refused_and_leaves_the_ticket_good() -> None:
    book = TicketBook(ttl=30, clock=Clock())
    ticket = book.mint("worker:w1", Access("Bearer w", "session"))
    with pytest.raises(PermissionDenied, match="^the ticket is for worker:w1, not worker:w2$"):
        book.redeem(ticket, "worker:w2")
    assert book.redeem(ticket, "worker:w1").session_token == "session"


def test_an_expired_ticket_says_so_and_is_forgotten_later() -> None:
    clock = Clock()
    book = TicketBook(ttl=30, clock=clock)
    ticket = book.mint("fleet", ACCESS)
    clock.now += 30
    with pytest.raises(Unauthenticated, match=r"expired 0s ago \(tickets live 30s\)"):
        book.redeem(ticket, "fleet")
    clock.now += 30 * tickets.REMEMBER_TTLS + 1
    book.mint("fleet", ACCESS)  # minting purges what is past remembering
    assert len(book) == 1
    with pytest.raises(Unauthenticated, match="unknown"):
        book.redeem(ticket, "fleet")


def test_minting_is_bounded_by_live_tickets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tickets, "MAX_TICKETS", 3)
    clock = Clock()
    book = TicketBook(ttl=30, clock=clock)
    book.mint("fleet", Access("Bearer a"))
    clock.now += 10
    for who in ("b", "c"):
        book.mint("fleet", Access(f"Bearer {who}"))
    with pytest.raises(ResourceExhausted) as refused:
        book.mint("fleet", Access("Bearer d"))
    # The truth: how many are live, and when the oldest of them expires.
    assert str(refused.value) == (
        "this gateway holds 3 live tickets, its limit; the oldest expires in 20s (or sooner, as they are spent)"
    )


def test_spent_tickets_do_not_count_against_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: 10,000 minted and spent tickets refused every mint for ~330 s."""
    monkeypatch.setattr(tickets, "MAX_TICKETS", 3)
    book = TicketBook(ttl=30, clock=Clock())
    spent = [book.mint("fleet", ACCESS) for _ in range(3)]
    for ticket in spent:
        book.redeem(ticket, "fleet")
    assert len(book) == 0 and book.remembered() == 3
    for _ in range(3):  # the cap is free again at once
        book.mint("fleet", ACCESS)
    with pytest.raises(Unauthenticated, match="already used"):  # and a spent one still says why
        book.redeem(spent[0], "fleet")


def test_expired_tickets_do_not_count_against_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tickets, "MAX_TICKETS", 3)
    clock = Clock()
    book = TicketBook(ttl=30, clock=clock)
    old = [book.mint("fleet", ACCESS) for _ in range(3)]
    clock.now += 30  # expired: not live, but still remembered
    for _ in range(3):
        book.mint("fleet", ACCESS)
    with pytest.raises(Unauthenticated, match=r"expired 0s ago"):
        book.redeem(old[0], "fleet")


def test_one_credential_cannot_take_every_ticket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tickets, "MAX_TICKETS_PER_CREDENTIAL", 2)
    clock = Clock()
    book = TicketBook(ttl=30, clock=clock)
    greedy = Access("Bearer worker", "session-1")
    first = book.mint("worker:w1", greedy)
    clock.now += 5
    book.mint("worker:w1", greedy)
    with pytest.raises(ResourceExhausted) as refused:
        book.mint("worker:w1", greedy)
    assert str(refused.value) == (
        "these credentials hold 2 live tickets, the limit per credential; the oldest expires in 25s: "
        "open streams with the tickets already minted"
    )
    book.mint("worker:w2", Access("Bearer worker", "session-2"))  # another session: its own share
    book.mint("fleet", ACCESS)
    book.redeem(first, "worker:w1")  # spending one frees a place
    book.mint("worker:w1", greedy)


def test_remembered_tickets_are_bounded_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tickets, "MAX_REMEMBERED", 2)
    book = TicketBook(ttl=30, clock=Clock())
    spent = [book.mint("fleet", ACCESS) for _ in range(3)]
    for ticket in spent:
        book.redeem(ticket, "fleet")
    assert book.remembered() == 2
    with pytest.raises(Unauthenticated, match="unknown"):  # the oldest, forgotten
        book.redeem(spent[0], "fleet")
    with pytest.raises(Unauthenticated, match="already used"):
        book.redeem(spent[2], "fleet")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param(b"", None, id="none"),
        pytest.param(b"a=1", None, id="other parameters"),
        pytest.param(b"ticket=abc_-1", "abc_-1", id="one"),
        pytest.param(b"a=1&ticket=abc&b=2", "abc", id="among others"),
    ],
)
def test_the_ticket_in_a_query(query: bytes, expected: str | None) -> None:
    assert tickets.ticket_in(query) == expected


@pytest.mark.parametrize(
    ("query", "why"),
    [
        pytest.param(b"ticket=a&ticket=b", "more than once", id="repeated"),
        pytest.param(b"ticket=a&ticket=", "more than once", id="repeated, one blank"),
        pytest.param(b"ticket=a;ticket=b", "malformed", id="semicolon"),
        pytest.param(b"ticket=", "malformed", id="blank"),
        pytest.param(b"ticket=a%20b", "malformed", id="a space"),
        pytest.param(b"ticket=" + b"a" * 129, "malformed", id="too long"),
    ],
)
def test_a_repeated_blank_or_malformed_ticket_is_refused(query: bytes, why: str) -> None:
    with pytest.raises(Unauthenticated, match=why):
        tickets.ticket_in(query)


def test_tickets_are_random_and_only_their_hash_is_kept() -> None:
    book = TicketBook(clock=Clock())
    minted = {book.mint("fleet", ACCESS) for _ in range(50)}
    assert len(minted) == 50 and all(len(t) >= 43 for t in minted)
    assert not minted & set(book._live)


@pytest.mark.parametrize(
    ("scope", "worker", "execution_id", "expected"),
    [("worker", "w1", "", "worker:w1"), ("execution", "", "e1", "execution:e1"), ("fleet", "", "", "fleet")],
)
def test_scopes(scope: str, worker: str, execution_id: str, expected: str) -> None:
    assert tickets.scope_of(scope, worker, execution_id) == expected


def test_a_scope_missing_its_subject_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match="^worker is required"):
        tickets.scope_of("worker", "", "")
    with pytest.raises(InvalidArgument, match="^scope must be one of worker, execution, fleet"):
        tickets.scope_of("everything", "", "")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:3000", "http://127.0.0.1:3000"),
        ("https://Dash.Example.com/", "https://dash.example.com"),
        ("https://dash.example.com:443", "https://dash.example.com"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_origins_are_written_as_browsers_send_them(given: str, expected: str) -> None:
    assert origin(given) == expected


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("*", "refused: name each origin"),
        ("dash.example.com", "is not an origin"),
        ("ftp://dash.example.com", "is not an origin"),
        ("https://dash.example.com/app", "more than an origin"),
        ("https://user@dash.example.com", "more than an origin"),
        ("http://127.0.0.1:99999", "invalid port"),
    ],
)
def test_what_is_not_an_origin_is_refused_with_the_form(given: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as refused:
        origin(given)
    assert "scheme://host[:port]" in str(refused.value)


def _execution(state: int, generation: int) -> control_pb2.Execution:
    return control_pb2.Execution(state=state, generation=generation)  # type: ignore[arg-type]


def test_event_ids_order_every_state_across_requeues() -> None:
    s = control_pb2
    life = [
        _execution(s.EXECUTION_STATE_CREATED, 0),
        _execution(s.EXECUTION_STATE_SCHEDULED, 1),
        _execution(s.EXECUTION_STATE_CREATED, 1),  # not claimed in time: back in line
        _execution(s.EXECUTION_STATE_SCHEDULED, 2),
        _execution(s.EXECUTION_STATE_RUNNING, 2),
        _execution(s.EXECUTION_STATE_CREATED, 2),  # its worker was lost
        _execution(s.EXECUTION_STATE_SCHEDULED, 3),
        _execution(s.EXECUTION_STATE_RUNNING, 3),
        _execution(s.EXECUTION_STATE_COMPLETED, 3),
    ]
    ids = [event_id(e) for e in life]
    assert ids == sorted(set(ids))
    assert [parse_id(format_id(i)) for i in ids] == ids
    assert event_id(_execution(s.EXECUTION_STATE_CANCELLED, 0)) > event_id(life[0])


@pytest.mark.parametrize("text", ["x", "1", "1.", ".2", "-1.2", "1.2.3"])
def test_a_malformed_last_event_id_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="GENERATION.STEP"):
        parse_id(text)
