"""The prior cost of a call, derived from the models' real-time factors on this machine
(the engines' warm-up) and a call profile, before any call was measured."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_adapters.hosting.call_cost import (
    DENSE_CALLER,
    PHONE_CALLER,
    REFERENCE_WARM_UP_TTS_RTF,
    UNMEASURED_CALL_COST,
    WEBRTC_CALLER,
    CallCostMeter,
    CallProfile,
    CostSettings,
    derived_call_cost,
)
from voxflow_adapters.hosting.errors import CapacityExceededError
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.rates import ModelRates, WarmUpRates
from voxflow_voice.engines.stt import WhisperStt
from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS, PiperTts
from voxflow_voice.engines.vad import SileroVad

REFERENCE = WarmUpRates(stt=0.075, tts=0.087, vad=0.0040, audio_seconds=2.6,
                        cpu_seconds=0.73)
"""What ``VoiceEngines.warm_up()`` measured on the reference machine (the 2-core
development machine, Dec 5): the medians of 5 warm-ups, each in a fresh process after
``VoiceEngines.load()``, flock'd, load 3.6-3.8 (call_cost.REFERENCE_WARM_UP_TTS_RTF)."""
MEASURED_DENSE = (0.136 + 0.133) / 2
MEASURED_WEBRTC = (0.170 + 0.185) / 2
"""The same dense call's server CPU per call on that machine, ``benchmarks/webrtc_cpu.py
--pairs 3 --turns 3`` at 99cfcc8, two runs (medians of 3 each, load 3.5-6.6 and 1.3-3.6;
its table): the simulated transport and WebRTC."""
MEASURED_PHONE = 0.145
"""The dense call over the phone there, ``webrtc_cpu.py --kinds simulated,phone --turns
3`` (Dec 5; its table): the median of three runs' medians, 15.9, 14.5 and 13.6 % (load
0.3-1.1, 1.7-7.6 and 1.0-2.1; simulated 14.3, 13.6 and 13.6 % in the same runs)."""
WARM_UP_OVERSTATEMENT = 0.71 * (0.087 - 0.058) + 0.22 * (0.075 - 0.041)
"""What the warm-up's short sentence over-states a dense call's model work by, there:
Piper 0.087 at warm-up against 0.058 per s of a 9.6 s reply, Whisper 0.075 against
0.041 per s of a 3 s question (``cpu_budget.py``, README, Dec 4): 2.8 points."""


class Still:
    """A machine where no time passes: the meter's windows never close."""

    def clock(self) -> float:
        return 0.0

    def cpu_time(self) -> float:
        return 0.0


def warmed(rates: WarmUpRates) -> ModelRates:
    kept = ModelRates()
    kept.warmed_up = rates
    return kept


def meter(rates: ModelRates | None, cores: int = 2, **settings: object) -> CallCostMeter:
    still = Still()
    return CallCostMeter(CostSettings(**settings), cores=cores,  # type: ignore[arg-type]
                         cpu_time=still.cpu_time, machine_time=lambda: None,
                         clock=still.clock, rates=rates)


def scaled(rates: WarmUpRates, *, stt: float = 1.0, tts: float = 1.0,
           vad: float = 1.0) -> WarmUpRates:
    return WarmUpRates(stt=rates.stt * stt, tts=rates.tts * tts, vad=rates.vad * vad,
                       audio_seconds=rates.audio_seconds, cpu_seconds=rates.cpu_seconds)


def test_the_prior_is_the_models_work_of_the_profile_plus_its_overhead() -> None:
    p = DENSE_CALLER
    assert p.reference_tts_rtf == REFERENCE_WARM_UP_TTS_RTF == REFERENCE.tts
    expected = (REFERENCE.stt * p.speech * p.stt_passes + REFERENCE.tts * p.reply
                + REFERENCE.vad * p.heard + p.overhead)  # (this machine is the reference)
    assert derived_call_cost(REFERENCE) == pytest.approx(expected)
    # over WebRTC a call costs more: aiortc's work besides
    assert derived_call_cost(REFERENCE, WEBRTC_CALLER) > derived_call_cost(REFERENCE)


@pytest.mark.parametrize(("profile", "measured"), [(DENSE_CALLER, MEASURED_DENSE),
                                                   (WEBRTC_CALLER, MEASURED_WEBRTC),
                                                   (PHONE_CALLER, MEASURED_PHONE)])
def test_the_reference_machines_warm_up_derives_about_what_its_calls_were_measured_at(
        profile: CallProfile, measured: float) -> None:
    """Not below the measured cost (a prior that admits too many calls is the failure
    admission exists to prevent), and above it by no more than the warm-up's short
    sentence over-states the models (and a point's rounding): 15.7 % and 19.9 %."""
    prior = derived_call_cost(REFERENCE, profile)
    assert measured <= prior <= measured + WARM_UP_OVERSTATEMENT + 0.01
    slots = meter(warmed(REFERENCE), cores=2).cost().slots
    assert slots == math.floor(0.7 * 2 / derived_call_cost(REFERENCE)) == 8


def test_a_slower_model_makes_a_call_dearer_and_the_slots_fewer() -> None:
    base = meter(warmed(REFERENCE)).cost()
    assert base.source == "models"
    assert base.per_call == pytest.approx(derived_call_cost(REFERENCE))
    for slower in (scaled(REFERENCE, stt=10), scaled(REFERENCE, tts=3),
                   scaled(REFERENCE, vad=30)):
        cost = meter(warmed(slower)).cost()
        assert cost.per_call > base.per_call and cost.slots < base.slots
        assert cost.prior == cost.per_call and cost.source == "models"
    # a machine half as fast in everything: every part of the call twice the cost
    half = scaled(REFERENCE, stt=2, tts=2, vad=2)
    assert derived_call_cost(half) == pytest.approx(2 * derived_call_cost(REFERENCE))


def test_a_configured_prior_overrides_the_models_and_none_at_all_is_the_unmeasured_one() -> None:
    assert meter(warmed(REFERENCE), prior_call_cost=0.5).cost().per_call == 0.5
    assert meter(warmed(REFERENCE), prior_call_cost=0.5).cost().source == "prior"
    for rates in (None, ModelRates()):  # no engines, or engines never warmed up
        cost = meter(rates).cost()
        assert (cost.source, cost.per_call) == ("prior", UNMEASURED_CALL_COST)


def test_a_warm_up_after_the_meter_was_made_sets_its_prior() -> None:
    rates = ModelRates()
    late = meter(rates)
    assert late.cost().source == "prior"
    rates.warmed_up = REFERENCE
    assert late.cost().source == "models"
    assert late.cost().per_call == pytest.approx(derived_call_cost(REFERENCE))


def test_the_first_measured_window_moves_from_the_derived_prior() -> None:
    now, cpu = [0.0], [0.0]
    slow = scaled(REFERENCE, stt=2, tts=2, vad=2)
    measured = CallCostMeter(CostSettings(window_seconds=1.0, smoothing=0.5), cores=2,
                             cpu_time=lambda: cpu[0], machine_time=lambda: None,
                             clock=lambda: now[0], rates=warmed(slow))
    measured.call_started()
    now[0], cpu[0] = 1.0, 0.1  # one call at 10 % of a core
    cost = measured.cost()
    assert cost.source == "measured"
    assert cost.per_call == pytest.approx(0.5 * 0.1 + 0.5 * derived_call_cost(slow))
    assert cost.prior == pytest.approx(derived_call_cost(slow))


def test_admission_takes_the_slots_of_the_derived_prior_and_says_so() -> None:
    rates = warmed(scaled(REFERENCE, stt=2, tts=2, vad=2))  # 31 % a call: 4 slots on 2 cores
    rates.record("tts", 0.5, 2.0)
    admission = AdmissionController(AdmissionSettings(), meter=meter(rates), rates=rates)
    load = admission.load()
    assert (load.cost_source, load.slots) == ("models", 4)
    assert load.prior_call_cost == load.call_cost == pytest.approx(derived_call_cost(
        rates.warmed_up))  # type: ignore[arg-type]
    assert load.model_rtf == {"tts": 0.25}
    assert "4 slot(s) now at 31% of a core per call (from the models' real-time factors" \
        in load.capacity()
    assert load.as_dict()["model_rtf"] == {"tts": 0.25}
    held = [admission.admit(f"call-{i}") for i in range(4)]
    with pytest.raises(CapacityExceededError, match="from its models' real-time factors"):
        admission.admit("one-more")
    for slot in held:
        slot.release()


@pytest.mark.parametrize("field", ["speech", "stt_passes", "reply", "heard", "overhead",
                                   "reference_tts_rtf"])
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, 1e9, "x"])
def test_a_profile_out_of_range_is_refused_naming_the_field(field: str, bad: object) -> None:
    with pytest.raises(ValidationError, match=field):
        CallProfile(**{field: bad})  # type: ignore[arg-type]


def test_bad_priors_and_arguments_are_refused() -> None:
    for bad in (0, -0.1, 65, math.nan, math.inf):
        with pytest.raises(ValidationError, match="prior_call_cost"):
            CostSettings(prior_call_cost=bad)
    with pytest.raises(ValidationError, match="reference_tts_rtf"):
        CallProfile(reference_tts_rtf=0)
    with pytest.raises(ValidationError, match="unknown"):
        CallProfile(unknown=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="WarmUpRates"):
        derived_call_cost({"stt": 0.1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CallProfile"):
        derived_call_cost(REFERENCE, {"speech": 0.1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ModelRates"):
        CallCostMeter(rates=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ModelRates"):
        AdmissionController(rates=object())  # type: ignore[arg-type]


def test_a_phone_server_derives_its_prior_for_a_phone_call() -> None:
    """A phone call costs the transport's own work besides the dense caller's (+0.8
    points measured, the median of three runs): the phone server's admission derives its prior from
    :data:`PHONE_CALLER`, between the simulated and the WebRTC call's (before: from
    :data:`DENSE_CALLER`, a phone call's transport left out)."""
    from voxflow_adapters.hosting.calls import flow_call_factory
    from voxflow_adapters.phone.server import PhoneServer
    from voxflow_adapters.testkit.flows import Teller

    engines = VoiceEngines(stt=None, tts=None, make_vad=None, rates=warmed(REFERENCE))  # type: ignore[arg-type]
    server = PhoneServer(flow_call_factory(Teller), engines)
    assert server.admission.meter.settings.profile == PHONE_CALLER
    prior = server.load().prior_call_cost
    assert prior == pytest.approx(derived_call_cost(REFERENCE, PHONE_CALLER))
    assert derived_call_cost(REFERENCE) < prior < derived_call_cost(REFERENCE, WEBRTC_CALLER)


async def test_the_warm_up_measures_this_machines_models_and_admission_derives_from_them(
) -> None:
    """Real models: the warm-up's CPU real-time factors, the jobs the engines record,
    and the prior admission derives from them."""
    rates = ModelRates()
    tts = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS, rates=rates)
    engines = VoiceEngines(stt=WhisperStt(rates=rates), tts=tts,
                           make_vad=lambda: SileroVad(rates=rates), rates=rates)
    admission = AdmissionController(rates=rates)  # made before the warm-up, as a server is
    assert admission.load().cost_source == "prior"
    measured = await engines.warm_up()
    assert rates.warmed_up is measured
    for rtf in (measured.stt, measured.tts, measured.vad):
        assert 0 < rtf < math.inf
    assert 2.0 < measured.audio_seconds < 6.0  # the warm-up's question
    assert measured.cpu_seconds > (measured.stt + measured.vad) * measured.audio_seconds
    assert set(rates.recent()) == {"stt", "tts", "vad"}  # every job recorded, wall time
    load = admission.load()
    assert load.cost_source == "models"
    assert load.prior_call_cost == pytest.approx(derived_call_cost(measured))
    assert load.model_rtf == rates.recent()
    # again (a second entry point, or a speech cache that kept the text): Piper's work
    # is timed, never its cache's
    assert tts.cache is not None  # (the default keeps sentences said again)
    again = await engines.warm_up()
    assert tts.statistics().cached == 0 and again.tts > 0
