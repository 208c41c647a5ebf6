"""The strict wire reader: hostile data-channel messages and ``/offer`` bodies are refused
with a typed reason (never another exception), fuzzed with hypothesis."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from voxflow_adapters.hosting.wire import MAX_DEPTH, OfferBody, parse_offer, read_json
from voxflow_adapters.webrtc.protocol import (
    MAX_MESSAGE_BYTES,
    EventMessage,
    HangupMessage,
    MuteMessage,
    PageMessage,
    PlaybackMessage,
    ProtocolError,
    ServerMessage,
    parse_page_message,
)
from voxflow_voice.events import SessionEvent

pytestmark = pytest.mark.unit

OFFER_LIMIT = 24_096


def rejected(raw: str | bytes) -> str:
    with pytest.raises(ProtocolError) as info:
        parse_page_message(raw)
    return info.value.reason


def test_deep_nesting_under_the_size_limit_is_refused_not_a_recursion_error() -> None:
    raw = "[" * 1500 + "]" * 1500  # 3 KB: json.loads alone raises RecursionError
    assert len(raw) < MAX_MESSAGE_BYTES
    assert rejected(raw) == f"JSON nested deeper than {MAX_DEPTH} levels"
    assert "nested deeper" in rejected('{"v": 1, "type": "mute", "muted": ' + "[" * 1500)
    # Brackets inside strings are text, not nesting.
    assert read_json('{"a": "[[[[[[[[[[\\"{{{{{{{{{"}', max_bytes=100) == \
        {"a": '[[[[[[[[[["{{{{{{{{{'}


@pytest.mark.parametrize("message, reason", [
    ({"v": True, "type": "hangup"}, "unsupported protocol version True"),
    ({"v": 1.0, "type": "hangup"}, "unsupported protocol version 1.0"),
    ({"v": "1", "type": "hangup"}, "unsupported protocol version '1'"),
    ({"v": 1, "type": "mute", "muted": "yes"}, "muted: Input should be a valid boolean"),
    ({"v": 1, "type": "mute", "muted": 1}, "muted: Input should be a valid boolean"),
    ({"v": 1, "type": "playback", "playing": 0}, "playing: Input should be a valid boolean"),
    ({"v": 1, "type": "hangup", "why": "bored"}, "why: Extra inputs are not permitted"),
    ({"v": 1, "type": ["mute"]}, "unknown message type ['mute']"),
])
def test_types_are_strict(message: dict[str, Any], reason: str) -> None:
    assert reason in rejected(json.dumps(message))


def test_duplicate_keys_are_refused_instead_of_the_last_one_winning() -> None:
    assert rejected('{"v": 1, "type": "mute", "type": "hangup"}') == "duplicate key 'type'"
    assert rejected('{"v": 1, "v": 1, "type": "hangup"}') == "duplicate key 'v'"


def test_non_json_constants_bytes_and_huge_numbers_are_refused() -> None:
    assert rejected('{"v": 1, "type": "mute", "muted": NaN}') == "not JSON: NaN is not JSON"
    assert "Infinity" in rejected('{"v": Infinity, "type": "hangup"}')
    assert rejected(b"\xff\xfe{}") == "not JSON: the bytes are not UTF-8"
    with pytest.raises(ProtocolError, match=r"^not JSON: Exceeds the limit"):  # int digits
        read_json('{"v": ' + "9" * 4500 + "}", max_bytes=OFFER_LIMIT)
    assert "exceeds" in rejected("x" * (MAX_MESSAGE_BYTES + 1))
    assert "exceeds" in rejected("é" * (MAX_MESSAGE_BYTES // 2 + 1))  # bytes, not characters


def test_valid_messages_still_parse() -> None:
    assert parse_page_message('{"v": 1, "type": "mute", "muted": true}') == \
        MuteMessage(type="mute", muted=True)
    assert parse_page_message(b'{"type": "playback", "playing": false, "v": 1}') == \
        PlaybackMessage(type="playback", playing=False)
    assert parse_page_message('{"v":1,"type":"hangup"}') == HangupMessage(type="hangup")


def _resume(resume: object) -> str:
    return json.dumps({"type": "offer", "sdp": "v=0", "resume": resume})


def test_offer_bodies_are_read_by_the_same_strict_reader() -> None:
    assert parse_offer(b'{"type": "offer", "sdp": "v=0"}', max_bytes=OFFER_LIMIT) == \
        OfferBody(type="offer", sdp="v=0")
    resumed = parse_offer(_resume({"v": 1, "session_id": "s-1", "token": "A" * 43}).encode(),
                          max_bytes=OFFER_LIMIT)
    assert resumed.resume is not None and resumed.resume.session_id == "s-1"
    assert "A" * 43 not in repr(resumed)  # the token never shows in a repr (or a log)
    cases = {
        json.dumps({"type": "offer", "sdp": "v=0"})[:-1] + "[" * 10_000: "nested deeper",
        '{"type": "offer", "type": "answer", "sdp": ""}': "duplicate key 'type'",
        '{"type": "offer", "sdp": "v=0", "extra": 1}': "extra: Extra inputs",
        '{"type": "offer", "sdp": 7}': "sdp: Input should be a valid string",
        '{"type": "answer", "sdp": ""}': "type: Input should be 'offer'",
        '["offer"]': "must be a JSON object",
        "{not json": "not JSON",
        # the resume object (versioned, strict: a typed reason naming the field)
        _resume({"v": 2, "session_id": "s", "token": "A" * 43}): "resume.v: Input should be 1",
        _resume({"v": 1, "session_id": "s"}): "resume.token: Field required",
        _resume({"v": 1, "session_id": "s", "token": "short"}): "resume.token: String should",
        _resume({"v": 1, "session_id": "s", "token": "A" * 43 + "!"}): "resume.token: String",
        _resume({"v": 1, "session_id": "", "token": "A" * 43}): "resume.session_id: String",
        _resume({"v": 1, "session_id": "s", "token": "A" * 43, "x": 1}): "resume.x: Extra",
        _resume({"v": True, "session_id": "s", "token": "A" * 43}): "should be 1 (the integer)",
        _resume("s"): "resume: Input should be",
    }
    for body, reason in cases.items():
        with pytest.raises(ProtocolError) as info:
            parse_offer(body.encode(), max_bytes=OFFER_LIMIT)
        assert reason in info.value.reason, body[:80]
        assert "\n" not in info.value.reason


# -- fuzzing ----------------------------------------------------------------------------

_json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
)
_json_values = st.recursive(
    _json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
_keys = st.sampled_from(["v", "type", "muted", "playing", "sdp", "x"])
_types = st.sampled_from(["mute", "playback", "hangup", "offer", "hello", ""])
# Message-shaped objects: near-valid keys and values, so the field checks get exercised.
_shaped = st.dictionaries(
    _keys, st.one_of(_json_values, _types, st.just(1), st.just(True)), max_size=4
)


def _raw_texts() -> st.SearchStrategy[str | bytes]:
    nested = st.integers(0, 2000).map(lambda n: "[" * n + "]" * n)
    tokens = st.lists(st.sampled_from(['{', '}', '[', ']', '"', '\\', ',', ':', '1', 'true',
                                       '"v"', '"type"', ' ', 'NaN', '-', 'e9']), max_size=60)
    return st.one_of(st.text(max_size=200), st.binary(max_size=200), nested,
                     tokens.map("".join), _shaped.map(json.dumps),
                     _json_values.map(json.dumps))


_FUZZ = settings(max_examples=1500, derandomize=True, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(_raw_texts())
def test_fuzz_page_messages_only_ever_parse_or_raise_protocol_error(raw: str | bytes) -> None:
    try:
        message = parse_page_message(raw)
    except ProtocolError as exc:
        assert exc.reason and "\n" not in exc.reason
    else:
        assert isinstance(message, MuteMessage | PlaybackMessage | HangupMessage)
        assert json.loads(raw)["v"] == 1


@_FUZZ
@given(st.one_of(_raw_texts(), _shaped.map(lambda d: json.dumps({"type": "offer", **d}))))
def test_fuzz_offer_bodies_only_ever_parse_or_raise_protocol_error(raw: str | bytes) -> None:
    body = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    try:
        offer = parse_offer(body, max_bytes=OFFER_LIMIT)
    except ProtocolError as exc:
        assert exc.reason and "\n" not in exc.reason
    else:
        assert offer.type == "offer" and isinstance(offer.sdp, str)


_resume_keys = st.sampled_from(["v", "session_id", "token", "x"])
_resume_values = st.one_of(_json_values, st.just(1), st.just("A" * 43), st.just("s-1"),
                           st.text(alphabet="Az09_-!.", min_size=0, max_size=140))


@_FUZZ
@given(st.one_of(st.dictionaries(_resume_keys, _resume_values, max_size=4), _json_values))
def test_fuzz_resume_objects_only_ever_parse_or_raise_protocol_error(resume: object) -> None:
    try:
        offer = parse_offer(_resume(resume).encode(), max_bytes=OFFER_LIMIT)
    except ProtocolError as exc:
        assert exc.reason and "\n" not in exc.reason
    else:
        if resume is None:  # "resume": null is an offer without one
            assert offer.resume is None
            return
        assert offer.resume is not None and offer.resume.v == 1
        assert 16 <= len(offer.resume.token) <= 128 and offer.resume.session_id


# -- the README's protocol table --------------------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_protocol_rows() -> set[tuple[str, str, frozenset[str]]]:
    section = README.read_text(encoding="utf-8").split(
        "### The data-channel protocol (version 1)", 1)[1].split("\n#", 1)[0]
    rows = set()
    for line in section.splitlines():
        if not line.startswith(("| server → page", "| page → server")):
            continue
        direction, kind, fields = (cell.strip() for cell in line.strip("|").split("|")[:3])
        if re.match(r"^`\w+`: ", fields):  # `state`: `listening`, ... (the values)
            names = set(re.findall(r"^`(\w+)`", fields))
        else:
            top_level = re.sub(r"\([^)]*\)", "", fields)  # drop "(null at the barge-in...)"
            names = set(re.findall(r"`(\w+)`", top_level))
        rows.add((direction, kind.strip("`"), frozenset(names)))
    return rows


def test_the_readme_protocol_table_is_exactly_the_protocol() -> None:
    def fields(model: type[BaseModel]) -> frozenset[str]:
        return frozenset(model.model_fields) - {"v", "type"}

    def kind(model: type[BaseModel]) -> str:
        return str(get_args(model.model_fields["type"].annotation)[0])

    expected = {("page → server", kind(m), fields(m)) for m in get_args(PageMessage.__origin__)}
    expected |= {("server → page", kind(m), fields(m)) for m in get_args(ServerMessage)
                 if m is not EventMessage}
    # (the session events' messages, as each event class declares them: two classes
    # declaring one type with other fields would make two rows, and fail here)
    expected |= {("server → page", view.type, frozenset(view.fields))
                 for event in get_args(get_args(SessionEvent)[0]) for view in event.wire}
    assert _readme_protocol_rows() == expected
