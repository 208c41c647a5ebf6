"""Checkpoints: completed methods, outputs, pending and_ events and state are resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxflow import CheckpointConfig, Flow, FlowState, and_, listen, start


class Work(FlowState):
    log: list[str] = []


class Pipeline(Flow[Work]):
    """begin → a, b; join waits for and_(a, b); b fails the first time."""

    fail_b = True
    runs: list[str] = []

    @start()
    def begin(self) -> str:
        Pipeline.runs.append("begin")
        self.state.log.append("begin")
        return "seed"

    @listen(begin)
    def a(self, seed: str) -> str:
        Pipeline.runs.append("a")
        self.state.log.append("a")
        return f"a({seed})"

    @listen(a)
    def b(self, value: str) -> str:
        Pipeline.runs.append("b")
        if Pipeline.fail_b:
            raise RuntimeError("b is down")
        return f"b({value})"

    @listen(and_(a, b))
    def join(self) -> str:
        Pipeline.runs.append("join")
        return "+".join(self.state.log)


def test_resume_skips_completed_methods_and_keeps_pending_and(tmp_path: Path) -> None:
    Pipeline.runs = []
    Pipeline.fail_b = True
    first = Pipeline()
    with pytest.raises(RuntimeError, match="b is down"):
        first.kickoff(from_checkpoint=CheckpointConfig(directory=tmp_path))
    path = tmp_path / f"{first.state.id}.json"
    saved = json.loads(path.read_text())
    assert saved["execution"]["completed"] == ["a", "begin"]
    assert saved["execution"]["pending_and"] == {"join": ["a"]}

    Pipeline.fail_b = False
    Pipeline.runs = []
    resumed = Pipeline()
    result = resumed.kickoff(from_checkpoint=CheckpointConfig(restore_from=path))
    assert Pipeline.runs == ["b", "join"]  # begin and a were not re-run
    assert result == "begin+a"
    assert resumed.state.id == first.state.id
    assert [n for n, _ in resumed.method_outputs] == ["begin", "a", "b", "join"]
    assert dict(resumed.method_outputs)["b"] == "b(a(seed))"  # fed the recorded output


def test_from_checkpoint_classmethod(tmp_path: Path) -> None:
    Pipeline.fail_b = True
    first = Pipeline()
    with pytest.raises(RuntimeError):
        first.kickoff(from_checkpoint=CheckpointConfig(directory=tmp_path))
    Pipeline.fail_b = False
    restored = Pipeline.from_checkpoint(tmp_path / f"{first.state.id}.json")
    assert restored.state.log == ["begin", "a"]
    assert restored.kickoff() == "begin+a"


def test_checkpoint_write_is_atomic(tmp_path: Path) -> None:
    Pipeline.fail_b = False
    flow = Pipeline()
    flow.kickoff(from_checkpoint=CheckpointConfig(directory=tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [f"{flow.state.id}.json"]  # no temp files
    assert json.loads((tmp_path / f"{flow.state.id}.json").read_text())["format"] == 1


def test_bad_checkpoint_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="restore_from"):
        CheckpointConfig(restore_from=tmp_path / "missing.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": 1, "flow": "SomethingElse", "state": {}}))
    with pytest.raises(ValueError, match="cannot resume"):
        Pipeline().kickoff(from_checkpoint=CheckpointConfig(restore_from=other))
    with pytest.raises(TypeError, match="CheckpointConfig"):
        Pipeline().kickoff(from_checkpoint={"directory": str(tmp_path)})  # type: ignore[arg-type]
