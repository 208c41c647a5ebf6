"""ModelRates: each model's recent real-time factor, from the jobs its engine records."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.errors import EngineWarmUpError
from voxflow_voice.engines.rates import Model, ModelRates, timing
from voxflow_voice.engines.stt import WhisperStt
from voxflow_voice.engines.tts import PiperTts, SynthesizedSentence
from voxflow_voice.engines.vad import SileroVad

from voxflow.errors import EngineError, VoxflowError


def test_the_recent_factor_is_the_jobs_seconds_over_their_audios() -> None:
    rates = ModelRates(recent=2)
    assert rates.recent() == {}
    rates.record("stt", 0.3, 3.0)
    rates.record("stt", 0.1, 1.0)
    assert rates.recent() == {"stt": pytest.approx(0.1)}
    rates.record("stt", 2.0, 1.0)  # a loaded machine: the oldest job drops out
    assert rates.recent() == {"stt": pytest.approx(2.1 / 2.0)}
    rates.record("tts", 0.0, 0.0)  # no audio: nothing to divide by, not counted
    assert "tts" not in rates.recent()
    assert "stt 1.050" in repr(rates)


@pytest.mark.parametrize(("model", "seconds", "audio"), [
    ("whisper", 0.1, 1.0), ("stt", -0.1, 1.0), ("stt", math.nan, 1.0),
    ("stt", 0.1, math.inf), ("stt", 0.1, -1.0)])
def test_a_bad_job_is_refused(model: str, seconds: float, audio: float) -> None:
    with pytest.raises(ValueError):
        ModelRates().record(model, seconds, audio)  # type: ignore[arg-type]


@pytest.mark.parametrize("recent", [0, -1, 10_001, True, 2.5])
def test_a_bad_window_is_refused(recent: object) -> None:
    with pytest.raises(ValueError, match="recent"):
        ModelRates(recent)  # type: ignore[arg-type]


class _Recording(ModelRates):
    """ModelRates that also lists what it was asked to record."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, float]] = []

    def record(self, model: Model, seconds: float, audio_seconds: float) -> None:
        self.asked.append((model, audio_seconds))
        super().record(model, seconds, audio_seconds)


def test_timing_records_the_block_as_one_job_of_its_model() -> None:
    rates = _Recording()
    with timing(rates, "stt", 2.0):
        pass
    with timing(rates, "tts") as job:  # the audio known once the work is done
        job.audio_seconds = 3.0
    with pytest.raises(RuntimeError), timing(rates, "vad") as job:
        raise RuntimeError("the model failed")  # before its audio was set: not counted
    with pytest.raises(RuntimeError), timing(rates, "stt", 1.0):
        raise RuntimeError("the decode failed")  # its audio given: counted
    with timing(None, "stt", 1.0) as job:  # no rates: nothing to record in
        pass
    assert rates.asked == [("stt", 2.0), ("tts", 3.0), ("vad", 0.0), ("stt", 1.0)]
    assert set(rates.recent()) == {"stt", "tts"}  # (a job without audio is not counted)


def test_engines_refuse_rates_that_are_not_model_rates() -> None:
    for engine in (WhisperStt, PiperTts, SileroVad):
        with pytest.raises(TypeError, match="ModelRates"):
            engine(rates=object())  # type: ignore[arg-type]


def test_loaded_engines_share_one_recorder() -> None:
    engines = VoiceEngines.load(end_of_turn="none")
    assert engines.rates.warmed_up is None
    assert engines.stt.rates is engines.rates  # type: ignore[attr-defined]
    assert engines.tts.rates is engines.rates  # type: ignore[attr-defined]
    assert engines.make_vad().rates is engines.rates  # type: ignore[attr-defined]


class _MuteTts:
    """A TTS engine that loads but says nothing (a broken voice package)."""

    sample_rate = 22_050

    def synthesize(self, text: str, **_: object) -> Iterator[object]:
        return iter(())


async def test_a_tts_that_says_nothing_fails_the_warm_up_naming_it_and_the_fix(
    stt: WhisperStt,
) -> None:
    engines = VoiceEngines(stt=stt, tts=_MuteTts(), make_vad=SileroVad)  # type: ignore[arg-type]
    with pytest.raises(EngineWarmUpError) as failed:
        await engines.warm_up()
    error = failed.value
    assert isinstance(error, VoxflowError) and isinstance(error, RuntimeError)
    assert error.kind == "tts" and "\n" not in str(error)
    assert str(error).startswith("the text-to-speech engine _MuteTts said nothing of the "
                                 "warm-up text")
    assert "--tts, VOXFLOW_TTS" in str(error) and "reinstall" in str(error)
    assert engines.rates.warmed_up is None


class _ArrayTts:
    """A plug-in TTS whose ``synthesize`` yields bare sample arrays, not sentences (the
    protocol's :class:`SpokenSentence`: ``samples`` and ``words``, as the test kit's
    scripts read them)."""

    sample_rate = 22_050

    def synthesize(self, text: str) -> Iterator[object]:
        return iter([np.full(2205, 0.1, np.float32)] * 3)


async def test_a_tts_breaking_the_sentence_contract_fails_the_warm_up_naming_it(
    stt: WhisperStt,
) -> None:
    """The warm-up reads each sentence's ``samples`` as the protocol types them (before:
    ``getattr(s, "samples", s)`` took a bare array as a sentence, so such an engine
    passed its warm-up and broke at the first scripted line instead)."""
    engines = VoiceEngines(stt=stt, tts=_ArrayTts(), make_vad=SileroVad)  # type: ignore[arg-type]
    with pytest.raises(EngineWarmUpError) as failed:
        await engines.warm_up()
    assert failed.value.kind == "tts"
    assert str(failed.value) == (  # (review 10 finding 11: not "reinstall its package")
        "the text-to-speech engine _ArrayTts yielded a ndarray: synthesize must yield "
        "sentences with .samples (float32 at sample_rate) and .words "
        "(voxflow_voice.engines.SpokenSentence); update its package or report it to its "
        "author")
    # the contract's own error, turned into the warm-up's in one place (as a plug-in's)
    assert isinstance(failed.value.__cause__, EngineError)
    assert engines.rates.warmed_up is None


class _OneSentenceTts:
    """A plug-in TTS saying the whole text as one sentence (Piper's, joined)."""

    def __init__(self, piper: PiperTts) -> None:
        self.piper = piper
        self.sample_rate = piper.sample_rate
        self.runs = 0

    def synthesize(self, text: str) -> Iterator[SynthesizedSentence]:
        self.runs += 1
        said = [s.samples for s in self.piper.synthesize(text, cached=False)]
        yield SynthesizedSentence(np.concatenate(said), ())


async def test_a_tts_saying_the_text_as_one_sentence_is_timed_on_a_second_run(
    stt: WhisperStt, tts: PiperTts,
) -> None:
    """Review 10 finding 13: the untimed first sentence was the only one, so the warm-up
    failed as "said nothing of the warm-up text"; now a second run is timed."""
    one = _OneSentenceTts(tts)
    engines = VoiceEngines(stt=stt, tts=one, make_vad=SileroVad)  # type: ignore[arg-type]
    rates = await engines.warm_up()
    assert one.runs == 2
    assert rates.tts > 0 and rates.audio_seconds > 2.0  # (the whole text: about 4 s)
    assert engines.rates.warmed_up is rates


class _BrokenStt:
    """A plug-in STT engine that loads but whose decode raises (a missing library)."""

    async def transcribe(self, audio: object) -> object:
        raise OSError("libcuda.so.1: cannot open shared object file\n(the second line)")


async def test_a_plug_in_stt_raising_in_the_warm_up_is_a_typed_one_line_error(
    tts: PiperTts,
) -> None:
    engines = VoiceEngines(stt=_BrokenStt(), tts=tts, make_vad=SileroVad)  # type: ignore[arg-type]
    with pytest.raises(EngineWarmUpError) as failed:
        await engines.warm_up()
    error = failed.value
    assert isinstance(error, VoxflowError) and error.kind == "stt"
    assert isinstance(error.__cause__, OSError)
    assert str(error) == (
        "the speech-to-text engine _BrokenStt failed its warm-up run (OSError: libcuda.so.1: "
        "cannot open shared object file); check its model and options (--stt, VOXFLOW_STT; "
        "voxflow doctor lists the engines installed) or reinstall its package")
    assert engines.rates.warmed_up is None


class _SpecErrorStt:
    """A plug-in STT whose decode raises an :class:`EngineError` of its own, its message
    already naming the engine (not a contract error of voxflow's)."""

    async def transcribe(self, audio: object) -> object:
        raise EngineError("the speech-to-text engine acme-stt lost its licence server",
                          kind="stt")


async def test_an_engine_error_of_the_engines_own_is_not_taken_for_a_contract_error(
    tts: PiperTts,
) -> None:
    """Review 10 finding 25: the warm-up passed every ``EngineError`` on as a broken
    contract, so this one read "the speech-to-text engine the speech-to-text engine
    acme-stt ..."; only :class:`EngineContractError` is, the rest fail their run."""
    engines = VoiceEngines(stt=_SpecErrorStt(), tts=tts, make_vad=SileroVad)  # type: ignore[arg-type]
    with pytest.raises(EngineWarmUpError) as failed:
        await engines.warm_up()
    assert str(failed.value) == (
        "the speech-to-text engine _SpecErrorStt failed its warm-up run (EngineError: the "
        "speech-to-text engine acme-stt lost its licence server); check its model and "
        "options (--stt, VOXFLOW_STT; voxflow doctor lists the engines installed) or "
        "reinstall its package")
    assert isinstance(failed.value.__cause__, EngineError)


async def test_a_vad_raising_in_the_warm_up_is_a_typed_error_naming_it(
    stt: WhisperStt, tts: PiperTts,
) -> None:
    def broken_vad() -> SileroVad:
        raise RuntimeError("no onnxruntime provider")

    engines = VoiceEngines(stt=stt, tts=tts, make_vad=broken_vad)
    with pytest.raises(EngineWarmUpError, match=r"^the voice activity engine "
                       r".*broken_vad failed its warm-up run \(RuntimeError: no onnxruntime "
                       r"provider\); check its model and options \(--vad, VOXFLOW_VAD") as failed:
        await engines.warm_up()
    assert failed.value.kind == "vad" and isinstance(failed.value.__cause__, RuntimeError)
