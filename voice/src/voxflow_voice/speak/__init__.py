"""Speaking: from identity-tagged reply text to played, fenced audio.

Reply text is cut into speakable segments (:mod:`.segmenter`) and synthesized by the TTS
engine; :mod:`.speaker` speaks one reply (a foreground answer, a speculative one held
until its verdict, :mod:`.speculation`, or an announcement); :mod:`.playback` is the last
hand-off, fencing by identity and recording what was heard (:mod:`.heard`,
:mod:`.history`); :mod:`.playout` is the one queue every adapter plays from.
"""

__all__: list[str] = []
