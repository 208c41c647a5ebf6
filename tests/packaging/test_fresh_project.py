"""A new project with only voxflow installed runs a barge-in test on real models.

The project is a folder outside the checkout holding one test file for the example
assistant (examples/test_assistant.py, the README's "Testing your assistant" example;
the assistant is ``voxflow.examples.assistant``), no conftest; pytest runs there in a
fresh virtual environment where ``voxflow[voice,postgres]`` was installed from the built wheels.
The plugin's fixtures come from the installed package's ``pytest11`` entry point, and
the models from their PyPI packages.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, make_venv, run

pytestmark = pytest.mark.packaging

CORE_ONLY_TEST = '''
from voxflow import ConversationConfig, Flow
from voxflow.testing import ScriptedLLM, fail, reply
from voxflow.turns import TurnState


def test_a_scripted_llm_answers_a_conversational_flow():
    llm = ScriptedLLM(reply("Hi! How can I help?", tokens_per_second=50), fail(status=503))

    @ConversationConfig(llm=llm)
    class Chat(Flow[TurnState]):
        pass

    flow = Chat()
    assert flow.handle_turn("Hello") == "Hi! How can I help?"
    assert llm.calls[0].produced == llm.calls[0].total == 5


def test_the_voice_fixtures_are_not_here(request):
    assert "voice_call" not in request.fixturenames
'''


def test_a_barge_in_test_runs_in_a_new_project(installed_voxflow: Path, tmp_path: Path) -> None:
    project = tmp_path / "my-assistant"
    project.mkdir()
    shutil.copy(ROOT / "examples" / "test_assistant.py", project / "test_assistant.py")
    python = str(installed_voxflow / "python")
    where = run([python, "-c",
                 "import voxflow_adapters.testkit.pytest_plugin as p; print(p.__file__)"],
                cwd=project)
    assert Path(where.stdout.strip()).is_relative_to(installed_voxflow.parent)
    result = run([python, "-m", "pytest", "-v", "-p", "no:cacheprovider"], cwd=project)
    assert "voxflow: scripted calls on virtual audio time" in result.stdout
    assert "test_assistant.py::test_the_user_cuts_the_story_short PASSED" in result.stdout
    assert "2 passed" in result.stdout
    assert [p.name for p in project.iterdir() if p.suffix == ".py"] == ["test_assistant.py"]


def test_core_voxflow_alone_has_the_scripted_llm_and_no_voice_plugin(
    voxflow_wheels: dict[str, Path], tmp_path: Path
) -> None:
    bin_dir = make_venv(tmp_path / "venv", str(voxflow_wheels["voxflow"]), "pytest")
    python = str(bin_dir / "python")
    missing = run([python, "-c", "import importlib.util as u; print(u.find_spec('numpy'), "
                   "u.find_spec('voxflow_adapters'))"], cwd=tmp_path)
    assert missing.stdout.split() == ["None", "None"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_chat.py").write_text(CORE_ONLY_TEST)
    result = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project)
    assert "2 passed" in result.stdout
