"""Issue 15 item 3: ``input_files`` on ``kickoff`` and the turn APIs.

Files are validated before anything changes, attached to the turn's user message by
reference (a content-hash record, never the content), and sent to the LLM as litellm
multimodal parts. What litellm actually sends is captured with a litellm callback
(real litellm, ``mock_response=``).
"""

from __future__ import annotations

import base64
import io
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxflow import (
    LLM,
    ConversationConfig,
    ConversationState,
    Flow,
    SQLiteFlowPersistence,
    persist,
    start,
)
from voxflow.errors import InputFileError
from voxflow.files import FileRef, InputFilePolicy, prepare_input_files
from voxflow.flow import FlowEventBus
from voxflow.testing import EventRecorder
from voxflow.turns import TurnRunner, TurnState

pytestmark = pytest.mark.unit

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))  # sniffed by its signature
JPEG = b"\xff\xd8\xff\xe0" + b"JFIF-ish" * 4
NOTES = "# Order notes\nZEBRA-42: two teas, one cake\n"


@pytest.fixture
def sent() -> Iterator[list[list[dict[str, Any]]]]:
    """The message lists litellm really sends to the provider (captured before the call)."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    calls: list[list[dict[str, Any]]] = []

    class Capture(CustomLogger):  # type: ignore[misc]
        def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
            calls.append(messages)

    before = list(litellm.callbacks)
    litellm.callbacks = [*before, Capture()]
    try:
        yield calls
    finally:
        litellm.callbacks = before


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """The one folder paths may come from."""
    folder = tmp_path / "uploads"
    folder.mkdir()
    (folder / "notes.md").write_text(NOTES)
    (folder / "photo.png").write_bytes(PNG)
    return folder


def make_chat(place: Path, model: str = "openai/gpt-4o-mini", **policy: Any) -> type[Any]:
    @ConversationConfig(llm=LLM(model, mock_response="Noted."))
    class Chat(Flow[ConversationState]):
        input_file_policy = InputFilePolicy(
            allowed_dirs=(place,), store_dir=place.parent / "store", **policy
        )

    return Chat


def user_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    users = [m for m in messages if m["role"] == "user"]
    content = users[-1]["content"]
    assert isinstance(content, list)
    return content


# ------------------------------------------------------------------ accepted files


def test_files_reach_the_llm_as_multimodal_parts(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    flow = make_chat(place)()
    reply = flow.handle_turn(
        "What did I order?",
        input_files={
            "notes.md": place / "notes.md",  # a path
            "photo.png": str(place / "photo.png"),  # a path as a string
            "scan.jpg": io.BytesIO(JPEG),  # a binary file object
            "extra.txt": b"plain bytes",  # bytes
        },
    )
    assert reply == "Noted."
    parts = user_parts(sent[-1])
    assert parts[0] == {"type": "text", "text": "What did I order?"}
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert f'<file name="notes.md" type="text/markdown">\n{NOTES}\n</file>' in texts
    assert '<file name="extra.txt" type="text/plain">\nplain bytes\n</file>' in texts
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert images == [
        "data:image/png;base64," + base64.b64encode(PNG).decode(),
        "data:image/jpeg;base64," + base64.b64encode(JPEG).decode(),
    ]
    # the user message carries the records, in order
    (user, _assistant) = flow.state.messages
    assert [(f.name, f.media_type, f.size) for f in user.files] == [
        ("notes.md", "text/markdown", len(NOTES)),
        ("photo.png", "image/png", len(PNG)),
        ("scan.jpg", "image/jpeg", len(JPEG)),
        ("extra.txt", "text/plain", len(b"plain bytes")),
    ]
    assert user.content == "What did I order?"  # the text itself is unchanged
    assert flow.input_files["photo.png"].read_bytes() == PNG


def test_a_model_without_vision_gets_a_note_instead_of_the_image(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    flow = make_chat(place, model="gpt-3.5-turbo")()
    flow.handle_turn("see this", input_files={"photo.png": PNG, "notes.md": NOTES.encode()})
    parts = user_parts(sent[-1])
    assert all(p["type"] == "text" for p in parts)
    texts = "\n".join(p["text"] for p in parts)
    assert "this model cannot see images" in texts
    assert "ZEBRA-42" in texts  # the text file is still sent
    assert base64.b64encode(PNG).decode() not in texts


def test_files_are_stored_by_reference_not_in_snapshots(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    db = place.parent / "sessions.db"
    chat = make_chat(place)
    persisted = persist(SQLiteFlowPersistence(db))(chat)
    flow = persisted()
    flow.handle_turn("first", session_id="s1", input_files={"notes.md": place / "notes.md"})
    flow.handle_turn("second", session_id="s1", input_files={"photo.png": PNG})
    snapshot = flow.state.model_dump_json()
    assert "ZEBRA-42" not in snapshot
    assert base64.b64encode(PNG).decode()[:40] not in snapshot
    assert b"ZEBRA-42" not in db.read_bytes()  # nor in the database
    with sqlite3.connect(db) as conn:
        dumped = "\n".join(conn.iterdump())
    assert "ZEBRA-42" not in dumped
    # the records name the stored, content-addressed copies
    ref = flow.state.messages[0].files[0]
    assert isinstance(ref, FileRef)
    assert Path(ref.path).read_bytes() == NOTES.encode()
    assert Path(ref.path).name == ref.sha256
    # a fresh instance restores the records, and the LLM sees both files again
    again = persisted()
    assert again.load_session("s1")
    restored = again.state.messages[0].files[0]
    assert restored == ref
    again.handle_turn("third", session_id="s1")
    history_parts = [
        p for m in sent[-1] if isinstance(m["content"], list) for p in m["content"]
    ]
    assert any("ZEBRA-42" in p.get("text", "") for p in history_parts)
    assert any(p["type"] == "image_url" for p in history_parts)


def test_the_same_content_is_stored_once(place: Path) -> None:
    policy = InputFilePolicy(allowed_dirs=(place,), store_dir=place.parent / "store")
    a = prepare_input_files({"a.txt": b"same"}, policy)["a.txt"]
    b = prepare_input_files({"b.txt": io.BytesIO(b"same")}, policy)["b.txt"]
    assert a.path == b.path and a.sha256 == b.sha256
    assert len(list((place.parent / "store").rglob("*"))) == 2  # one folder, one file


async def test_every_turn_api_accepts_input_files(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    chat = make_chat(place)
    flow = chat()
    assert await flow.ahandle_turn("a", input_files={"one.txt": b"ONE"}) == "Noted."
    stream = await flow.astream_turn("b", input_files={"two.txt": b"TWO"})
    async with stream:
        frames = [f async for f in stream]
    assert frames[-1].type == "conversation_turn_completed"
    files = [[f.name for f in m.files or ()] for m in flow.state.messages if m.role == "user"]
    assert files == [["one.txt"], ["two.txt"]]
    assert "TWO" in user_parts(sent[-1])[1]["text"]


def test_sync_stream_turn_and_turn_runner_accept_input_files(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    flow = make_chat(place)()
    stream = flow.stream_turn("c", input_files={"three.txt": b"THREE"})
    with stream:
        list(stream.events)
    assert stream.result == "Noted."
    assert "THREE" in user_parts(sent[-1])[1]["text"]

    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Tracked."))
    class Tracked(Flow[TurnState]):
        input_file_policy = InputFilePolicy(store_dir=place.parent / "store")

    runner = TurnRunner(Tracked())
    events = list(runner.stream_turn("d", input_files={"four.txt": b"FOUR"}))
    assert events[-1].type == "completed" and events[-1].text == "Tracked."
    assert "FOUR" in user_parts(sent[-1])[1]["text"]


def test_kickoff_accepts_input_files_for_its_methods(place: Path) -> None:
    seen: list[Any] = []

    class Reader(Flow[Any]):
        input_file_policy = InputFilePolicy(allowed_dirs=(place,), store_dir=place / "s")

        @start()
        def read(self) -> str:
            seen.append(self.input_files)
            ref = self.input_files.get("notes.md")
            return ref.read_bytes().decode() if ref else "no files"

    flow = Reader()
    assert flow.kickoff(input_files={"notes.md": place / "notes.md"}) == NOTES
    assert list(seen[0]) == ["notes.md"]
    assert flow.kickoff() == "no files"  # files belong to one run
    assert flow.input_files == {}


# ------------------------------------------------------------------ hostile input


def refused(
    flow: Any, files: Any, name: str, match: str, exc: type[Exception] = InputFileError
) -> None:
    """The turn is refused naming the file; nothing changed, nothing stored, no event."""
    before = flow.state.model_dump()
    store = place_store(flow)
    stored_before = sorted(store.rglob("*")) if store.exists() else []
    bus = flow.event_bus
    with EventRecorder(bus) as events, pytest.raises(exc, match=match) as info:
        flow.handle_turn("hello", input_files=files)
    if isinstance(info.value, InputFileError):
        assert info.value.name == name
        assert repr(name) in str(info.value)
    assert flow.state.model_dump() == before
    assert (sorted(store.rglob("*")) if store.exists() else []) == stored_before
    assert events.events == []


def place_store(flow: Any) -> Path:
    store = type(flow).input_file_policy.store_dir
    assert store is not None
    return Path(store)


@pytest.fixture
def hostile(place: Path) -> Any:
    flow = make_chat(place, max_bytes=1024, max_files=3)(event_bus=FlowEventBus())
    flow.handle_turn("a first good turn", input_files={"ok.txt": b"fine"})
    return flow


def test_paths_outside_the_allowed_folders_are_refused(hostile: Any, place: Path) -> None:
    outside = place.parent / "secret.txt"
    outside.write_text("top secret")
    refused(hostile, {"s.txt": outside}, "s.txt", "outside the allowed folders")
    refused(hostile, {"s.txt": str(place / ".." / "secret.txt")}, "s.txt", "outside")
    refused(hostile, {"p": "/etc/passwd"}, "p", "outside the allowed folders")
    link = place / "innocent.txt"
    link.symlink_to(outside)  # a symlink inside that points out
    refused(hostile, {"innocent.txt": link}, "innocent.txt", "outside the allowed folders")


def test_a_folder_swapped_for_a_symlink_after_the_check_cannot_lead_outside(
    place: Path,
) -> None:
    """The path is checked resolved, then opened component by component from the allowed
    folder without following a symlink: a folder on the way replaced by a symlink to
    elsewhere between the two steps (a race, played here in order) is refused."""
    from voxflow.files import _open_beneath

    outside = place.parent / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    (place / "sub").mkdir()
    (place / "sub" / "secret.txt").write_text("fine")
    checked = (place / "sub" / "secret.txt").resolve(strict=True)  # what the check saw
    os.close(_open_beneath(place.resolve(), checked))  # opens while nothing was swapped
    (place / "sub" / "secret.txt").unlink()
    (place / "sub").rmdir()
    (place / "sub").symlink_to(outside, target_is_directory=True)  # the swap
    with pytest.raises(OSError):
        _open_beneath(place.resolve(), checked)


def test_non_files_and_missing_files_are_refused(hostile: Any, place: Path) -> None:
    (place / "folder").mkdir()
    refused(hostile, {"d": place / "folder"}, "d", "not a regular file")
    os.mkfifo(place / "pipe")  # reading it would block forever
    refused(hostile, {"pipe": place / "pipe"}, "pipe", "not a regular file")
    refused(hostile, {"gone": place / "gone.txt"}, "gone", "does not exist")
    refused(hostile, {"nul": "a\x00b"}, "nul", "NUL")
    (place / "loop").symlink_to(place / "loop")
    refused(hostile, {"loop": place / "loop"}, "loop", "cannot be resolved")


def test_too_big_empty_and_too_many_are_refused(hostile: Any, place: Path) -> None:
    (place / "big.txt").write_text("x" * 1025)
    refused(hostile, {"big.txt": place / "big.txt"}, "big.txt", "1025 bytes; the limit is 1024")
    refused(hostile, {"big.txt": b"x" * 5000}, "big.txt", "the limit is 1024")
    refused(hostile, {"big.txt": io.BytesIO(b"x" * 5000)}, "big.txt", "over 1024 bytes")
    refused(hostile, {"empty.txt": b""}, "empty.txt", "empty")
    many = {f"f{i}.txt": b"x" for i in range(4)}
    refused(hostile, many, "", "at most 3 per call", ValueError)


def test_wrong_types_and_contents_are_refused(hostile: Any) -> None:
    refused(hostile, {"n": 42}, "n", "must be a path, bytes or a binary file object, not int")
    refused(hostile, {"t": io.StringIO("text mode")}, "t", "binary mode")
    refused(hostile, {"doc.pdf": b"%PDF-1.7\n\xe2\xe3\xcf\xd3"}, "doc.pdf", "unsupported type")
    refused(hostile, {"x.bin": b"\x00\x01\x02"}, "x.bin", "binary data")
    refused(hostile, {"fake.png": b"not an image"}, "fake.png", "not such an image")
    refused(hostile, {"pic.png": JPEG}, "pic.png", "image/png but it holds image/jpeg")
    refused(hostile, ["a.txt"], "", "must be a mapping", TypeError)
    # the good file alongside a bad one is not stored either
    refused(hostile, {"good.txt": b"GOOD", "bad": 3.5}, "bad", "not float")


@pytest.mark.parametrize("name", ["", "../x.txt", "a/b.txt", "a\\b", "bell\x07", ".", "x" * 256])
def test_bad_names_are_refused(hostile: Any, name: str) -> None:
    refused(hostile, {name: b"data"}, name, "name")


def test_a_non_string_name_is_refused(hostile: Any) -> None:
    refused(hostile, {3: b"data"}, "3", "must be a string")


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    name=st.text(min_size=0, max_size=20),
    data=st.one_of(
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
        st.binary(max_size=32).map(lambda b: PNG[:8] + b),
    ),
)
def test_any_input_is_accepted_or_refused_by_name(place: Path, name: str, data: bytes) -> None:
    policy = InputFilePolicy(
        allowed_dirs=(place,), store_dir=place.parent / "fuzz", max_bytes=48
    )
    try:
        refs = prepare_input_files({name: data}, policy)
    except InputFileError as exc:
        assert exc.name in (name, repr(name))
        return
    (ref,) = refs.values()
    assert ref.name == name and ref.size == len(data) <= 48
    assert ref.read_bytes() == data
    assert ref.media_type in {"text/plain", "text/markdown", "text/csv", "application/json"} or (
        ref.media_type.startswith("image/")
    )


async def test_async_turn_apis_refuse_bad_files_before_anything_changes(hostile: Any) -> None:
    before = hostile.state.model_dump()
    with pytest.raises(InputFileError, match=r"'x\.bin'") as info:
        await hostile.ahandle_turn("hi", input_files={"x.bin": b"\x00\x01"})
    assert info.value.name == "x.bin"
    with pytest.raises(InputFileError, match="outside the allowed folders"):
        await hostile.astream_turn("hi", input_files={"p": "/etc/passwd"})
    assert hostile.state.model_dump() == before


def test_the_router_sees_the_messages_text_not_the_files(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    from voxflow import RouterConfig, listen

    router_llm = LLM("openai/gpt-4o-mini", mock_response='{"intent": "orders"}')

    @ConversationConfig(
        llm=LLM("openai/gpt-4o-mini", mock_response="Noted."),
        router=RouterConfig(llm=router_llm),
    )
    class Routed(Flow[ConversationState]):
        input_file_policy = InputFilePolicy(allowed_dirs=(place,), store_dir=place / "s")

        @listen("orders")
        def handle_orders(self) -> str:
            """Questions about orders."""
            return "order desk"

    flow = Routed()
    assert flow.handle_turn("my list", input_files={"notes.md": place / "notes.md"}) == (
        "order desk"
    )
    assert flow.handle_turn("and the photo", input_files={"p.png": PNG}) == "order desk"
    assert flow.handle_turn("anything else?") == "order desk"
    router_prompts = [m for m in sent if "You route each user message" in m[0]["content"]]
    assert len(router_prompts) == 3
    last = "\n".join(str(m["content"]) for m in router_prompts[-1])
    assert "my list" in last and "and the photo" in last  # the history's text
    assert "ZEBRA-42" not in last  # not the file content
    assert base64.b64encode(PNG).decode()[:24] not in last


def test_a_dict_history_sends_its_files_too(
    place: Path, sent: list[list[dict[str, Any]]]
) -> None:
    from voxflow import ChatState

    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Noted."))
    class Legacy(Flow[ChatState]):
        input_file_policy = InputFilePolicy(store_dir=place / "s")

    flow = Legacy()
    flow.handle_turn("read this", input_files={"a.txt": b"ALPHA-7"})
    assert flow.state.messages[0]["files"][0].name == "a.txt"
    parts = user_parts(sent[-1])
    assert parts[0] == {"type": "text", "text": "read this"}
    assert "ALPHA-7" in parts[1]["text"]
