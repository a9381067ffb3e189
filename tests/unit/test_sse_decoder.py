"""The worker's event-stream parser: the same events whatever the chunking and line endings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux.worker.sse_decoder import Event, SseDecodeError, SseDecoder

STREAM = (
    b": a comment\r\n"
    b'id: 1\r\nevent: connected\r\ndata: {"a": 1}\r\n\r\n'
    b"id: 2\nevent: execution_scheduled\ndata: line one\ndata: line two\n\n"
    b"event: ping\rdata:no space\r\r"
    b"retry: 100\r\nid: 3\r\n\r\n"  # no data: nothing is dispatched
    b"data: plain\r\n\r\n"
)
EXPECTED = [
    Event("connected", '{"a": 1}', "1"),
    Event("execution_scheduled", "line one\nline two", "2"),
    Event("ping", "no space", "2"),
    Event("message", "plain", "3"),
]


def test_fields_comments_and_each_line_ending() -> None:
    assert SseDecoder().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), unique=True, max_size=40))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    decoder, events, start = SseDecoder(), [], 0
    for cut in [*sorted(cuts), len(STREAM)]:
        events += decoder.feed(STREAM[start:cut])
        start = cut
    assert events == EXPECTED


def test_a_large_data_line_in_many_pieces() -> None:
    decoder = SseDecoder()
    payload = b"x" * 300_000
    frame = b"event: execution_scheduled\r\ndata: " + payload + b"\r\n\r\n"
    events = []
    for i in range(0, len(frame), 1000):
        events += decoder.feed(frame[i : i + 1000])
    assert events == [Event("execution_scheduled", payload.decode(), "")]


def test_a_line_without_end_past_the_limit_is_refused() -> None:
    decoder = SseDecoder(max_line=1000)
    decoder.feed(b"data: " + b"x" * 900)
    with pytest.raises(SseDecodeError, match="longer than 1000 bytes"):
        decoder.feed(b"y" * 200)
