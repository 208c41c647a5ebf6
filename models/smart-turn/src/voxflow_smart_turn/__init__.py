"""Smart Turn v3.2 (Daily, BSD-2-Clause), the semantic end-of-turn model, as a file.

``MODEL_PATH`` is the ONNX file (CPU build, int8, 8.7 MB): a Whisper-tiny encoder with a
classification head whose input is 8 s of 16 kHz log-mel features and whose output is the
probability that the turn is complete. ``voxflow_voice.engines.end_of_turn.SmartTurn``
runs it; this package holds the file only and imports nothing.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODEL_PATH", "MODEL_SHA256"]

MODEL_PATH = Path(__file__).with_name("smart-turn-v3.2-cpu.onnx")
"""The model: ``smart-turn-v3.2-cpu.onnx``, as shipped in the pipecat-ai 1.14.0 wheel."""

MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
"""The file's SHA-256 (the packaging test checks it)."""
