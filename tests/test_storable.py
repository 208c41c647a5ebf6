"""Texts no store can keep are refused alike on SQLite and PostgreSQL (issue 29, item 4):
PostgreSQL refused a NUL in its text columns mid-write where SQLite stored it, so one
input worked on one backend and failed on the other. The validator is fuzzed against the
real databases: what it accepts, both keep as given; what it refuses, it names."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PG_URL, postgres_unreachable, skip_without_postgres
from voxflow.errors import UnstorableTextError
from voxflow.flow._row_store import RowStore
from voxflow.storable import check_json, check_text, storable_text, text_problem

pytestmark = pytest.mark.unit

StoreFactory = Any


def test_a_nul_and_a_lone_surrogate_are_named_with_their_place() -> None:
    with pytest.raises(UnstorableTextError) as caught:
        check_text("ab\x00c", "the job's result")
    assert str(caught.value) == ("the job's result contains a NUL character (U+0000) at "
                                 "index 2")
    assert caught.value.field == "the job's result"
    with pytest.raises(UnstorableTextError, match=r"lone surrogate \(U\+D800\) at index 1"):
        check_text("a\ud800", "sdp")
    with pytest.raises(UnstorableTextError, match="has 5 characters, over the limit of 4"):
        check_text("abcde", "progress", max_chars=4)
    with pytest.raises(UnstorableTextError, match=r"^outputs\.items\[1\] contains a NUL"):
        check_json({"items": ["ok", "no\x00"]}, "outputs")
    with pytest.raises(UnstorableTextError, match=r"^outputs has a key that contains a NUL"):
        check_json({"k\x00": 1}, "outputs")
    assert check_text("a\u00e9\U0001f600", "x") == "a\u00e9\U0001f600"
    assert storable_text("a\x00b\udfff") == "a\ufffdb\ufffd"


@contextlib.contextmanager
def _pg() -> Iterator[Any]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        yield conn


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(codec=None, blacklist_categories=()), max_size=40))
def test_fuzz_what_the_validator_accepts_both_backends_keep_and_it_names_the_rest(
        text: str) -> None:
    """Every text: refused (UnstorableTextError), or kept as given by SQLite and by
    PostgreSQL in a text column and in jsonb; a text either backend refuses is refused."""
    reason = postgres_unreachable()
    if reason is not None:
        skip_without_postgres()
    problem = text_problem(text)
    lite_ok = pg_ok = True
    with contextlib.closing(sqlite3.connect(":memory:")) as lite:
        try:
            assert lite.execute("SELECT ?", (text,)).fetchone()[0] == text
        except (sqlite3.Error, UnicodeError):
            lite_ok = False
    import psycopg

    with _pg() as conn:
        try:
            row = conn.execute("SELECT %s::text, %s::jsonb", (text, json.dumps(text))).fetchone()
            assert row is not None and row[0] == text and row[1] == text
        except (psycopg.Error, UnicodeError):
            pg_ok = False
    if problem is None:
        assert lite_ok and pg_ok, text
        assert storable_text(text) == text
    else:
        assert not pg_ok  # refused only what PostgreSQL refuses
        with pytest.raises(UnstorableTextError):
            check_text(text, "t")
        assert text_problem(storable_text(text)) is None


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=12))
def test_fuzz_check_json_refuses_exactly_the_values_holding_a_bad_text(value: Any) -> None:
    def texts(v: Any) -> Iterator[str]:
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for key, child in v.items():
                yield key
                yield from texts(child)
        elif isinstance(v, list):
            for child in v:
                yield from texts(child)

    bad = any(ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF for t in texts(value) for ch in t)
    try:
        check_json(value, "v")
    except UnstorableTextError as exc:
        assert bad and exc.field.startswith("v")
    else:
        assert not bad


def test_a_session_id_method_or_record_key_with_a_nul_is_refused_alike_on_both_backends(
        make_store: StoreFactory) -> None:
    """On PostgreSQL these were a psycopg DataError mid-transaction; SQLite stored them."""
    store: RowStore = make_store()
    for flow_uuid, method, state, field in (
            ("s\x00", "m", {"x": 1}, "session id"),
            ("s1", "m\x00", {"x": 1}, "method name"),
            ("s2", "m", {"jobs": {"j\x00": {"a": 1}}}, "record key")):
        with pytest.raises(UnstorableTextError) as caught:
            store.save_state(flow_uuid, method, state)
        assert field in str(caught.value), caught.value
        assert store.load_state(flow_uuid.replace("\x00", "")) is None  # nothing written
    with pytest.raises(UnstorableTextError, match="lease owner"):
        store.acquire_lease("s4", "worker\x00", ttl=5.0)
    # texts inside the state are stored escaped: both backends keep them as they were
    store.save_state("s5", "m", {"said": "a\x00b", "jobs": {"j": {"error": "e\x00"}}})
    assert store.load_state("s5") == {"said": "a\x00b", "jobs": {"j": {"error": "e\x00"}}}
