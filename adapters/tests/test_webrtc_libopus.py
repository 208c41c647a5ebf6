"""The ctypes binding to libopus: every input checked before libopus sees it, every
return code checked, hostile packets refused with a typed error (never a crash, never a
write past the binding's output buffer: a guard region behind it stays untouched), a
handle closed on one thread while another uses it says so (no use after free), and a
missing library named with its fix."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_adapters.webrtc import _libopus
from voxflow_adapters.webrtc._libopus import (
    APPLICATION_AUDIO,
    APPLICATION_VOIP,
    MAX_PACKET_BYTES,
    OpusCodecError,
    OpusDecoderHandle,
    OpusEncoderHandle,
    OpusLibraryError,
    library_version,
)

from voxflow.errors import ResourceClosedError

_T = np.arange(5760) / 48_000


def _tone(samples: int, channels: int = 1) -> np.ndarray:
    tone = 8000 * np.sin(2 * np.pi * 440 * _T[:samples])
    return np.repeat(tone, channels).astype(np.int16)


def _packet(samples: int = 960, channels: int = 1) -> bytes:
    encoder = OpusEncoderHandle(48_000, channels, APPLICATION_AUDIO)
    return encoder.encode(_tone(samples, channels))


def test_the_library_is_pyavs_bundled_libopus() -> None:
    assert library_version().startswith("libopus 1.")
    candidates = [os.path.realpath(p) for p in _libopus._candidates()]
    assert candidates, "PyAV's wheel bundles libopus beside av"
    loaded = os.path.realpath(_libopus._opus()._name)
    assert loaded == candidates[0]
    if sys.platform.startswith("linux"):  # the copy libavcodec links, mapped by import av
        assert loaded in _libopus._mapped_paths()


def test_of_several_copies_the_mapped_one_is_taken_else_the_first_sorted(
    tmp_path: Path,
) -> None:
    stale, linked = tmp_path / "libopus-0000.so.0", tmp_path / "libopus-ffff.so.0"
    for path in (stale, linked):
        path.write_bytes(b"")
    found = sorted([str(linked), str(stale)])
    assert _libopus._mapped_first(found, {str(linked)}) == [str(linked), str(stale)]
    assert _libopus._mapped_first(found, set()) == [str(stale), str(linked)]
    assert _libopus._mapped_first(found + found, set()) == [str(stale), str(linked)]
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 00000000 08:01 42   {linked}\n"
                    "7f01-7f02 rw-p 00000000 00:00 0 \n7f02-7f03 r--p 0 00:00 0  [heap]\n")
    if sys.platform.startswith("linux"):
        assert _libopus._mapped_paths(str(maps)) == {os.path.realpath(linked)}
    assert _libopus._mapped_paths(str(tmp_path / "absent")) == set()


@pytest.mark.parametrize(("packet", "samples"), [
    (_packet(), 320),  # 20 ms mono
    (_packet(channels=2), 320),  # a stereo packet: libopus's downmix
    (_packet(2880), 960),  # 60 ms
    (_packet(5760), 1920),  # 120 ms: the longest a packet holds, the buffer's size
    (bytes([0xF8]), 320),  # a TOC byte alone (DTX: a 20 ms CELT frame of 0 bytes)
])
def test_odd_but_valid_packets_decode_to_their_length_at_16_khz(packet: bytes,
                                                                  samples: int) -> None:
    decoder = OpusDecoderHandle(16_000, 1)
    out = decoder.decode(packet)
    assert out.dtype == np.int16 and out.shape == (samples,)
    out[:] = 0  # a copy: the next decode does not change it
    assert decoder.decode(_packet()).shape == (320,)


@pytest.mark.parametrize(("packet", "problem"), [
    (b"", "1 to 3825 bytes"),  # (libopus would conceal a loss: not a received packet)
    (bytes(MAX_PACKET_BYTES + 1), "1 to 3825 bytes"),
    (b"\x03", "corrupted stream"),  # a frame-count byte missing
    (b"\xff\xff\xff", "corrupted stream"),  # a frame count promising more
    (bytes(range(7, 207)), "corrupted stream"),
    (bytearray(_packet()), "must be bytes"),
    ("abc", "must be bytes"),
    (None, "must be bytes"),
])
def test_hostile_packets_are_refused_by_name_and_the_decoder_goes_on(packet: Any,
                                                                     problem: str) -> None:
    decoder = OpusDecoderHandle(16_000, 1)
    with pytest.raises(OpusCodecError, match=problem) as raised:
        decoder.decode(packet)
    assert isinstance(raised.value, ValueError)
    assert decoder.decode(_packet()).shape == (320,)


_GUARD = 4096  # values of a sentinel behind the output buffer
_SENTINEL = -12345


def _guarded(decoder: OpusDecoderHandle) -> np.ndarray:
    """Give ``decoder`` an output buffer with a guard region of sentinels behind the
    part it may write; returns the guard (a view) to check."""
    out = np.full(decoder.max_samples * decoder.channels + _GUARD, _SENTINEL, np.int16)
    decoder._out, decoder._out_at = out, out.ctypes.data
    return out[decoder.max_samples * decoder.channels:]


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=MAX_PACKET_BYTES + 10))
def test_random_bytes_decode_or_are_refused_and_never_overrun(data: bytes) -> None:
    """Whatever arrives: a typed error, or at most 120 ms of 16 kHz mono in whole 2.5 ms
    steps, nothing written past the output buffer (its guard region untouched); the
    decoder's state survives either."""
    decoder = OpusDecoderHandle(16_000, 1)
    guard = _guarded(decoder)
    try:
        out = decoder.decode(data)
    except OpusCodecError:
        pass
    else:
        assert out.dtype == np.int16 and 0 <= out.size <= 1920 and out.size % 40 == 0
    assert decoder.decode(_packet()).shape == (320,)
    assert (guard == _SENTINEL).all()


def test_the_guard_region_would_see_an_overrun() -> None:
    """The check above can fail: a decoder told its buffer is one sample longer than it
    is writes that sample into the guard."""
    decoder = OpusDecoderHandle(16_000, 1)
    guard = _guarded(decoder)
    decoder._out_at += 2  # (one sample on: the 120 ms packet's last sample lands behind)
    decoder.decode(_packet(5760))
    assert guard[0] != _SENTINEL and (guard[1:] == _SENTINEL).all()


def test_the_encoder_checks_its_input_and_settings() -> None:
    encoder = OpusEncoderHandle(48_000, 1, APPLICATION_VOIP)
    for bad in (_tone(961), _tone(960).astype(np.float32), _tone(960).tobytes(),
                _tone(1920)[::2], _tone(960).reshape(1, -1)):
        with pytest.raises(OpusCodecError):
            encoder.encode(bad)  # type: ignore[arg-type]
    refused: list[tuple[Any, Any]] = [
        (encoder.set_bitrate, 100), (encoder.set_complexity, 11),
        (encoder.set_complexity, True), (encoder.set_vbr_constraint, 0)]
    for call, value in refused:
        with pytest.raises(OpusCodecError):
            call(value)
    encoder.set_bitrate(96_000)
    encoder.set_complexity(5)
    assert 0 < len(encoder.encode(_tone(960))) <= MAX_PACKET_BYTES
    assert encoder.lookahead() > 0
    stereo = OpusEncoderHandle(48_000, 2, APPLICATION_AUDIO)
    with pytest.raises(OpusCodecError, match="2 channel"):
        stereo.encode(_tone(961, 1))  # an odd count of interleaved values
    for args in ((44_100, 1, APPLICATION_VOIP), (48_000, 3, APPLICATION_VOIP),
                 (48_000, 1, 7)):
        with pytest.raises(OpusCodecError):
            OpusEncoderHandle(*args)
    with pytest.raises(OpusCodecError):
        OpusDecoderHandle(22_050, 1)


def test_a_closed_codec_says_so_and_closing_twice_is_fine() -> None:
    encoder, decoder = OpusEncoderHandle(48_000, 1, APPLICATION_VOIP), OpusDecoderHandle(
        16_000, 1)
    for _ in range(2):
        encoder.close()
        decoder.close()
    with pytest.raises(ResourceClosedError):
        encoder.encode(_tone(960))
    with pytest.raises(ResourceClosedError):
        decoder.decode(_packet())


def test_no_libopus_is_an_error_that_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_libopus, "_lib", None)
    monkeypatch.setattr(_libopus, "_candidates", lambda: ["/nonexistent/libopus.so.0"])
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(OpusLibraryError, match="uv sync --locked") as raised:
        OpusDecoderHandle(16_000, 1)
    assert "/nonexistent/libopus.so.0" in str(raised.value)
    assert isinstance(raised.value, OSError) and "libopus0" in raised.value.fix
    assert "voxflow-adapters[webrtc]" in raised.value.fix
    assert "install av" not in raised.value.fix  # (an av other than the locked one)


_CLOSE_WHILE_IN_USE = textwrap.dedent("""
    import threading
    import numpy as np
    from voxflow_adapters.webrtc import _libopus as L
    from voxflow.errors import ResourceClosedError

    tone = (8000 * np.sin(np.arange(5760) / 7)).astype(np.int16)
    packet = L.OpusEncoderHandle(48_000, 1, L.APPLICATION_AUDIO).encode(tone)
    closed = {"decode": 0, "encode": 0}

    def hammer(kind, call):
        while True:
            try:
                call()
            except ResourceClosedError:
                closed[kind] += 1
                return

    for _ in range(300):
        decoder = L.OpusDecoderHandle(48_000, 2)
        encoder = L.OpusEncoderHandle(48_000, 1, L.APPLICATION_AUDIO)
        threads = [threading.Thread(target=hammer, args=("decode", lambda: decoder.decode(packet))),
                   threading.Thread(target=hammer, args=("encode", lambda: encoder.encode(tone)))]
        for t in threads:
            t.start()
        decoder.close()
        encoder.close()
        for t in threads:
            t.join()
    print(closed["decode"], closed["encode"])
""")


def test_a_handle_closed_while_another_thread_uses_it_raises_closed_not_a_crash() -> None:
    """close() on one thread while decode()/encode() run on another: each call after it
    raises ResourceClosedError, none runs on freed state. In a subprocess, so a use after
    free (with MALLOC_PERTURB_ poisoning freed memory: libopus's assertion aborts it)
    fails this test instead of killing pytest."""
    env = {**os.environ, "MALLOC_PERTURB_": "165"}
    done = subprocess.run([sys.executable, "-c", _CLOSE_WHILE_IN_USE], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["300", "300"]


def test_voxflow_doctor_says_whether_libopus_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from voxflow_adapters.webrtc.opus import doctor_checks

    from voxflow.cli.doctor import run_checks

    [row] = [c for c in run_checks() if c.name.startswith("libopus")]  # (its entry point)
    assert row.status == "ok" and library_version() in row.detail
    monkeypatch.setattr(_libopus, "_lib", None)
    monkeypatch.setattr(_libopus, "_candidates", lambda: [])
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    [(_, status, detail, fix)] = doctor_checks()
    assert status == "missing" and "could not be loaded" in detail
    assert "uv sync --locked" in fix and "uv sync" not in detail


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps: Linux")
def test_mapped_paths_resolve_each_file_once_and_skip_deleted_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file mapped five times is resolved once; a path ending in spaces is that path;
    a deleted file's mapping (" (deleted)") is not the file now at its path."""
    kept, spaced, gone = tmp_path / "libopus-a.so.0", tmp_path / "libopus-b.so.0  ", (
        tmp_path / "libopus-c.so.0")
    for path in (kept, spaced, gone):
        path.write_bytes(b"")
    lines = [f"7f0{n}-7f1{n} r-xp 0000 08:01 42   {kept}\n" for n in range(5)]
    lines += [f"7f20-7f21 r--p 0000 08:01 43   {spaced}\n",
              f"7f30-7f31 r--p 0000 08:01 44   {gone} (deleted)\n"]
    maps = tmp_path / "maps"
    maps.write_text("".join(lines))
    resolved: list[str] = []
    realpath = os.path.realpath

    def counted(path: str) -> str:
        resolved.append(path)
        return realpath(path)

    monkeypatch.setattr(os.path, "realpath", counted)
    mapped = _libopus._mapped_paths(str(maps))
    assert mapped == {realpath(kept), realpath(spaced)}
    assert sorted(resolved) == sorted([str(kept), str(spaced)])


_AT_EXIT = textwrap.dedent("""
    import atexit
    kept = {}
    # registered first, so it runs last: after weakref.finalize's own exit hook
    atexit.register(lambda: print(kept["encoder"]._close.alive, kept["decoder"]._close.alive))
    from voxflow_adapters.webrtc import _libopus as L
    kept["encoder"] = L.OpusEncoderHandle(48_000, 1, L.APPLICATION_AUDIO)
    kept["decoder"] = L.OpusDecoderHandle(16_000, 1)
""")


def test_handles_are_not_destroyed_at_interpreter_exit_without_their_lock() -> None:
    """weakref.finalize would destroy a live handle's state at exit without the handle's
    lock (a daemon thread still encoding would use freed state): the finalizers do not
    run at exit, so a handle alive then still is (the process's end frees it)."""
    done = subprocess.run([sys.executable, "-c", _AT_EXIT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
