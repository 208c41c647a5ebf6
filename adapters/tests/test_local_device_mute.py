"""``voxflow chat --voice`` on real PortAudio streams (ALSA's ``file`` PCM as the sound
card, as in ``test_local_device.py``): the example assistant wired like every entry point.
An order lookup asked for in the conversation (a text turn, before the call) completes
during the voice session and is announced once the floor is free (fed by the output
callback's receipts); the ``m`` key, pressed while it plays, cuts it: settled
``interrupted``, the history keeps the words heard, marked as an announcement, and
nothing of it is played after the fence but the device block being rendered.

(The ``file`` PCM is not paced by a clock: the microphone, silence here, runs far faster
than real time, so the call is kept short.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from voxflow_voice.audio import STT_SAMPLE_RATE

pytestmark = pytest.mark.device

RATE = 48_000
BLOCK = RATE // 50  # one 20 ms device block

CHAT = textwrap.dedent("""
    import asyncio, json, sys
    import voxflow_adapters.local.chat as local_chat
    from voxflow_adapters.local import LocalAudio, LocalAudioSettings
    from voxflow_voice.engines import VoiceEngines
    from voxflow_voice.session import VoiceSettings
    from voxflow.examples.assistant import assistant_class
    from voxflow.wiring import AssistantWiring

    played_at_flush = {}

    class CountingAudio(LocalAudio):  # the real adapter; counts reply samples at a fence
        def flush(self, delivery_id):
            dropped = super().flush(delivery_id)
            played_at_flush[delivery_id] = self.statistics().samples_played
            return dropped

    local_chat.LocalAudio = CountingAudio

    async def main(workdir):
        engines = VoiceEngines.load(deterministic=True)
        flow = assistant_class(lookup_seconds=2.0)()
        wiring = AssistantWiring(flow)
        checking = await wiring.text_turn("Where is my order?")  # starts the lookup
        view = local_chat.ChatView("test", headphones=True)
        chat = local_chat.VoiceChat(
            wiring, engines, view, voice_settings=VoiceSettings(echo_gate=False),
            audio_settings=LocalAudioSettings(input_rate=16000, output_rate=48000,
                                              stall_timeout=30))
        events, show = [], view.on_event
        loop = asyncio.get_running_loop()

        def on_event(event):
            show(event)
            events.append(event)
            if event.kind == "audio_started":
                loop.call_later(0.3, chat.on_key, "m")  # the m key, while it plays
            elif event.kind == "delivery_settled":
                chat.quit()

        view.on_event = on_event
        try:
            await asyncio.wait_for(chat.run(), 300)  # the file PCM is unpaced: slow under load
        except TimeoutError:
            print([(round(e.at, 2), e.kind) for e in events], chat.audio.statistics(),
                  file=sys.stderr)
            raise
        await wiring.aclose()
        played_end = chat.audio.statistics().samples_played
        json.dump({
            "checking": checking,
            "events": [e.model_dump(mode="json") for e in events],
            "played_at_flush": played_at_flush, "played_end": played_end,
            "messages": [m.model_dump(mode="json") for m in flow.state.messages],
            "jobs": [j.model_dump(mode="json") for j in flow.state.jobs.values()],
        }, open(workdir + "/result.json", "w"))

    asyncio.run(main(sys.argv[1]))
""")


def to_s16(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")


def test_the_m_key_cuts_an_announcement_on_a_real_sound_card(tmp_path: Path) -> None:
    try:
        import sounddevice  # noqa: F401 - PortAudio loads here
    except OSError as exc:
        pytest.skip(f"PortAudio is missing ({exc}): apt-get install libportaudio2")
    from .test_local_device import ASOUNDRC

    to_s16(np.zeros(STT_SAMPLE_RATE, np.float32)).tofile(tmp_path / "in.raw")  # silence
    (tmp_path / ".asoundrc").write_text(ASOUNDRC.format(
        rate=RATE, out=tmp_path / "out.raw", inp=tmp_path / "in.raw"))
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("ALSA_CONFIG_PATH", None)
    done = subprocess.run([sys.executable, "-c", CHAT, str(tmp_path)], env=env, timeout=420,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert "checking your order" in result["checking"]
    events = result["events"]
    kinds = [e["kind"] for e in events]
    [started] = [e for e in events if e["kind"] == "reply_started"]
    assert started["reply_kind"] == "progress"  # the announcement, no answer in between
    [muted] = [e for e in events if e["kind"] == "mute"]
    [settled] = [e for e in events if e["kind"] == "delivery_settled"]
    assert muted["muted"] and kinds.index("delivery_settled") > kinds.index("mute")
    assert (settled["delivery_id"], settled["status"]) == (started["delivery_id"], "interrupted")
    [cut] = [e for e in events if e["kind"] == "reply_interrupted"]
    [job] = result["jobs"]
    said = result["messages"][-1]  # what was heard of it, marked as an announcement
    assert said["metadata"]["announcement"] and said["metadata"]["interrupted"]
    assert said["metadata"]["job_ids"] == [job["job_id"]]
    assert said["metadata"]["delivery_id"] == settled["delivery_id"]
    assert said["metadata"]["heard_text"] == cut["heard_text"].strip()
    assert job["announcement"].startswith(cut["heard_text"].strip().rstrip(".,"))
    assert cut["heard_text"].strip() != job["announcement"]
    # after the fence, at most the device block being rendered still played
    flushed = result["played_at_flush"][settled["delivery_id"]]
    assert 0 <= result["played_end"] - flushed <= BLOCK
