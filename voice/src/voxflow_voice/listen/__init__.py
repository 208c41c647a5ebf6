"""Listening: from microphone frames to committed user turns.

Every inbound frame is validated (:mod:`.input_guard`) and the assistant's own voice is
kept out (:mod:`.echo`); the turn detector (:mod:`.turn_detector`, its state machine in
:mod:`.turn_machine`, its rules in :mod:`.turn_detection`, its events in
:mod:`.turn_events`) turns VAD probabilities into utterances, helped by an unvoiced onset
(:mod:`.hiss`) and a semantic end of turn; speech over a reply is arbitrated
(:mod:`.barge_in`); the pause is transcribed early (:mod:`.early_stt`). The models
themselves are engines (:mod:`voxflow_voice.engines`).
"""

__all__: list[str] = []
