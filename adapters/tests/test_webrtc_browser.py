"""A real browser calls ``voxflow serve``: Debian's Chromium, driven by Playwright, loads
the page, connects with a fake microphone that plays a WAV, and sees its transcript
and the assistant's audio arrive."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.webrtc import (
    Call,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import AudioStarted, TurnCommitted

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="Debian's chromium is missing (/usr/bin/chromium); "
                              ".ci/run installs it with apt-get"),
]

# Inbound audio as the browser decoded it (getStats of the receiving RTP stream).
_INBOUND_AUDIO = """async () => {
  const stats = await window.voxflow.pc.getStats();
  let energy = 0, samples = 0;
  stats.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      energy += s.totalAudioEnergy || 0; samples += s.totalSamplesReceived || 0;
    }
  });
  return {energy, samples};
}"""


async def test_chromium_calls_the_page_and_hears_the_assistant(
    engines: VoiceEngines, tmp_path: Path, hello_wav: Path
) -> None:
    from playwright.async_api import async_playwright

    wav = hello_wav
    calls: list[tuple[WebRtcPeer, Call]] = []
    # Default ICE host addresses: Chromium ignores loopback interfaces, so both sides
    # meet on the machine's own (non-loopback) address, which never leaves the host.
    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(port=0),
                          on_call=lambda peer, call: calls.append((peer, call)))
    async with server, async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=[
                "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}",
                "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        try:
            # The page's CSP forbids eval; Playwright's wait_for_function needs it.
            page = await browser.new_page(bypass_csp=True)
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            await page.goto(server.url)
            await page.click("#connect")
            await page.wait_for_function(
                "document.querySelector('#connection').dataset.state === 'connected'",
                timeout=20_000)
            await page.wait_for_selector("#transcript li.user", timeout=40_000)
            await page.wait_for_selector("#transcript li.assistant", timeout=20_000)
            await page.wait_for_function(
                "window.voxflow.messages.some(m => m.type === 'latency')", timeout=30_000)
            await page.wait_for_function("window.voxflow.latency.length > 0", timeout=10_000)
            ear: dict[str, Any] = await page.evaluate("window.voxflow.latency[0]")
            meta = await page.inner_text("#transcript li.user .meta")
            heard: dict[str, Any] = await page.evaluate(_INBOUND_AUDIO)
            user_line = await page.inner_text("#transcript li.user")
            reply_line = await page.inner_text("#transcript li.assistant")
            await page.click("#connect")  # hang up
            await server.wait_idle()
        finally:
            await browser.close()
    peer, call = calls[0]
    assert "hello" in user_line.lower(), console
    assert "How can I help you today?" in reply_line
    assert heard["samples"] > 48_000 and heard["energy"] > 0  # the reply's audio arrived
    first = next(e for e in call.session.events if isinstance(e, TurnCommitted))
    assert first.text in user_line
    assert any(isinstance(e, AudioStarted) for e in call.session.events)
    stats = peer.statistics()
    assert stats.outbound.reply_frames > 25 and stats.outbound.stale_samples == 0
    assert stats.page_playing is True, console  # the page reported its audio playing
    assert stats.close_reason == "the page hung up"
    # The page's voice-to-voice is the time at the user's ear: the server's figure plus
    # the inbound path the server measured and what getStats() says this browser adds
    # (its jitter buffer holds every received frame for a while: never 0).
    assert ear["server_ms"] is not None and ear["receive_ms"] >= 0
    assert ear["jitter_ms"] > 0 and ear["buffer_ms"] >= ear["jitter_ms"]
    assert ear["ear_ms"] == pytest.approx(ear["server_ms"] + ear["receive_ms"] + ear["rtt_ms"]
                                          + ear["buffer_ms"])
    assert f"voice-to-voice {math.floor(ear['ear_ms'] + 0.5)} ms at your ear" in meta  # Math.round
