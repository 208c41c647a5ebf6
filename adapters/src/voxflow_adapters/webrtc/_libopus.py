"""A small typed ctypes binding to libopus: a mono or stereo encoder and decoder.

The library is the copy PyAV's wheel bundles (``av.libs/libopus-*.so*`` on Linux,
``av/.dylibs`` on macOS, ``av.libs`` on Windows), the one PyAV itself encodes with, so the
packets are the ones PyAV's ``libopus`` codec gave; on Linux the copy libavcodec has
mapped into the process comes first (a stale file left beside it is not taken), and
more than one file is tried in sorted order. A PyAV built against the system's libopus
finds that one (``ctypes.util.find_library("opus")``). Neither: an
:class:`OpusLibraryError` that names the fix.

Calling libopus directly skips PyAV's frame and packet objects:
``benchmarks/opus_codec.py --runs 7`` (Piper's speech, CPU us per 20 ms frame, medians
of 7 runs, load 3.1-3.3 on 2 shared cores): encode 81.2 (PyAV's codec: 91.9), a packet
decoded straight to 16 kHz mono 27.1 (PyAV's 48 kHz decode: 31.6); opus.py's module
docstring has the rest of that run.

Every call's return code is checked: a negative one raises :class:`OpusError` with
libopus's own text (``opus_strerror``). Output goes only into buffers this module owns
and sizes: a packet into :data:`MAX_PACKET_BYTES`, a decoded frame into 120 ms (the
longest an Opus packet holds) at the decoder's rate. Input is checked before libopus
sees it (types, lengths); libopus only reads it.

A handle may be used from several threads: each call into libopus, and :meth:`close`,
holds the handle's lock (ctypes releases the GIL during the call, so without it a close
on one thread could free the state another thread's call is using, and two calls would
share the output buffer). A call after :meth:`close` raises ``ResourceClosedError``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from voxflow.errors import ResourceClosedError, VoxflowError

__all__ = [
    "APPLICATION_AUDIO",
    "APPLICATION_VOIP",
    "MAX_PACKET_BYTES",
    "OpusCodecError",
    "OpusDecoderHandle",
    "OpusEncoderHandle",
    "OpusError",
    "OpusLibraryError",
    "library_path",
    "library_version",
]

APPLICATION_VOIP: Final = 2048
"""``OPUS_APPLICATION_VOIP``."""
APPLICATION_AUDIO: Final = 2049
"""``OPUS_APPLICATION_AUDIO``."""
MAX_PACKET_BYTES: Final = 1275 * 3
"""The largest packet encoded or accepted for decoding (3 frames of Opus's largest)."""

_RATES: Final = (8_000, 12_000, 16_000, 24_000, 48_000)
_SET_BITRATE: Final = 4002
_SET_COMPLEXITY: Final = 4010
_SET_VBR_CONSTRAINT: Final = 4020
_GET_LOOKAHEAD: Final = 4027
_BAD_ARG: Final = -1


class OpusError(VoxflowError, RuntimeError):
    """libopus refused a call; ``code`` is its (negative) return code, the message its
    ``opus_strerror`` text and what was being done."""

    def __init__(self, message: str, code: int = _BAD_ARG) -> None:
        super().__init__(message)
        self.code = code


class OpusCodecError(OpusError, ValueError):
    """An input this binding refuses before libopus sees it (wrong type or length), or a
    packet libopus could not decode (``code`` < 0)."""


class OpusLibraryError(VoxflowError, OSError):
    """No libopus could be loaded; ``fix`` says what to install."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message}; {fix}")
        self.reason = message
        self.fix = fix


_FIX: Final = ("reinstall voxflow's locked dependencies (uv sync --locked in a checkout, "
               "else reinstall voxflow-adapters[webrtc]): the PyAV wheel they pin "
               "bundles libopus; or install the system's libopus (apt install libopus0, "
               "brew install opus)")


def _candidates() -> list[str]:
    """Paths of PyAV's bundled libopus, the likeliest first: the one mapped into this
    process (libavcodec's, Linux), then the files beside PyAV in sorted order."""
    try:
        import av  # (only to find the libopus its wheel bundles; none: the error below)
    except ImportError:
        return []
    here = os.path.dirname(os.path.abspath(av.__file__))
    found: list[str] = []
    for folder, pattern in (
        (os.path.join(here, os.pardir, "av.libs"), "libopus*.so*"),  # Linux (auditwheel)
        (os.path.join(here, ".dylibs"), "libopus*.dylib"),  # macOS (delocate)
        (os.path.join(here, os.pardir, "av.libs"), "*opus*.dll"),  # Windows (delvewheel)
        (here, "*opus*"),
    ):
        found += sorted(glob.glob(os.path.join(glob.escape(folder), pattern)))
    return _mapped_first([os.path.normpath(path) for path in found], _mapped_paths())


_DELETED: Final = " (deleted)"


def _mapped_paths(maps: str = "/proc/self/maps") -> set[str]:
    """The real paths of the files mapped into this process (empty where there is no
    ``/proc``: macOS, Windows). Each file once (it is mapped 4-5 times), then resolved; a
    path is taken as it stands (trailing spaces are part of it); a mapping whose file was
    deleted (the kernel's ``" (deleted)"``: PyAV upgraded under a running process) is
    none: the file at that path now is another one."""
    if not sys.platform.startswith("linux"):
        return set()
    try:
        with open(maps, encoding="utf-8", errors="replace", newline="\n") as lines:
            fields = [line.rstrip("\n").split(maxsplit=5) for line in lines]
    except OSError:
        return set()
    paths = {f[5] for f in fields if len(f) == 6 and f[5].startswith("/")}
    return {os.path.realpath(p) for p in paths if not p.endswith(_DELETED)}


def _mapped_first(paths: list[str], mapped: set[str]) -> list[str]:
    """``paths`` (each once) with those in ``mapped`` first, each group in its order."""
    unique = list(dict.fromkeys(paths))
    return ([p for p in unique if os.path.realpath(p) in mapped]
            + [p for p in unique if os.path.realpath(p) not in mapped])


def _load() -> ctypes.CDLL:
    tried: list[str] = []
    paths = _candidates()
    system = ctypes.util.find_library("opus")
    if system:
        paths.append(system)
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.opus_encoder_create  # noqa: B018 (an Opus library, not an odd match)
        except (OSError, AttributeError) as exc:
            tried.append(f"{path}: {exc}")
            continue
        _declare(lib)
        return lib
    detail = "; ".join(tried) if tried else "none found beside PyAV or on the system"
    raise OpusLibraryError(f"libopus could not be loaded ({detail})", _FIX)


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_int32, c_void_p = ctypes.c_int, ctypes.c_int32, ctypes.c_void_p
    lib.opus_strerror.argtypes, lib.opus_strerror.restype = [c_int], ctypes.c_char_p
    lib.opus_get_version_string.argtypes = []
    lib.opus_get_version_string.restype = ctypes.c_char_p
    lib.opus_encoder_create.argtypes = [c_int32, c_int, c_int, ctypes.POINTER(c_int)]
    lib.opus_encoder_create.restype = c_void_p
    # variadic: one fixed argument past these, so ctypes calls it as variadic (arm64)
    lib.opus_encoder_ctl.argtypes = [c_void_p, c_int]
    lib.opus_encoder_ctl.restype = c_int
    lib.opus_encode.argtypes = [c_void_p, c_void_p, c_int, c_void_p, c_int32]
    lib.opus_encode.restype = c_int32
    lib.opus_encoder_destroy.argtypes, lib.opus_encoder_destroy.restype = [c_void_p], None
    lib.opus_decoder_create.argtypes = [c_int32, c_int, ctypes.POINTER(c_int)]
    lib.opus_decoder_create.restype = c_void_p
    lib.opus_decode.argtypes = [c_void_p, ctypes.c_char_p, c_int32, c_void_p, c_int, c_int]
    lib.opus_decode.restype = c_int
    lib.opus_decoder_destroy.argtypes, lib.opus_decoder_destroy.restype = [c_void_p], None


_lib: ctypes.CDLL | OpusLibraryError | None = None
"""The loaded library, or the error the one search gave (kept: the search globs, reads
``/proc/self/maps`` and runs ``find_library``, whose ``ldconfig -p`` subprocess took
12.8 ms a miss in REVIEW11b's probe, and the receive path asks per inbound packet)."""


def _opus() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        try:
            _lib = _load()
        except OpusLibraryError as exc:
            _lib = exc
    if isinstance(_lib, OpusLibraryError):  # (a new one each time: no growing traceback)
        raise OpusLibraryError(_lib.reason, _lib.fix)
    return _lib


def library_path() -> str:
    """The name libopus was loaded by: the file's path for PyAV's copy, the soname
    ``find_library`` gave for the system's (``libopus.so.0``), as ``voxflow doctor``
    shows it.

    Raises:
        OpusLibraryError: no libopus could be loaded.
    """
    return str(_opus()._name)


def library_version() -> str:
    """libopus's version string (``"libopus 1.6.1"``).

    Raises:
        OpusLibraryError: no libopus could be loaded.
    """
    return str(_opus().opus_get_version_string().decode("ascii", "replace"))


def _strerror(code: int) -> str:
    text = _opus().opus_strerror(code)
    return text.decode("ascii", "replace") if text else f"error {code}"


def _check(code: int, what: str, error: type[OpusError] = OpusError) -> int:
    if code < 0:
        raise error(f"{what}: {_strerror(code)} ({code})", code)
    return code


def _int_in(name: str, value: Any, allowed: tuple[int, ...] | range) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise OpusCodecError(f"{name} must be one of {_shown(allowed)}, got {value!r}")
    return value


def _shown(allowed: tuple[int, ...] | range) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start}..{allowed.stop - 1}"
    return ", ".join(map(str, allowed))


class _Handle:
    """A libopus state's lifetime, shared by the encoder and the decoder: the pointer,
    the lock held around every call into libopus and :meth:`close`, and its destruction
    by :meth:`close` or when garbage-collected (not at interpreter exit: that would free
    the state without the lock while a daemon thread may still use it; the process's end
    frees it)."""

    _what = "Opus state"
    _handle: int | None
    _lock: threading.Lock

    def _own(self, handle: int, destroy: Callable[[int], None]) -> None:
        self._handle = handle
        self._lock = threading.Lock()
        self._close = weakref.finalize(self, destroy, handle)
        self._close.atexit = False

    def _live(self) -> int:
        if self._handle is None:
            raise ResourceClosedError(f"the {self._what} is closed")
        return self._handle

    def close(self) -> None:
        """Destroy the libopus state (idempotent; waits for a call under way on another
        thread)."""
        with self._lock:
            self._handle = None
            self._close()


class OpusEncoderHandle(_Handle):
    """One libopus encoder (``opus_encoder_create``), destroyed by :meth:`close` or when
    garbage-collected.

    Args:
        sample_rate: 8, 12, 16, 24 or 48 kHz.
        channels: 1 or 2.
        application: :data:`APPLICATION_VOIP` or :data:`APPLICATION_AUDIO`.

    Raises:
        OpusCodecError: a bad argument.
        OpusError: libopus refused to create it.
        OpusLibraryError: no libopus could be loaded.
    """

    _what = "Opus encoder"

    def __init__(self, sample_rate: int, channels: int, application: int) -> None:
        self.sample_rate = _int_in("sample_rate", sample_rate, _RATES)
        self.channels = _int_in("channels", channels, (1, 2))
        _int_in("application", application, (APPLICATION_VOIP, APPLICATION_AUDIO))
        lib = _opus()
        error = ctypes.c_int(0)
        handle = lib.opus_encoder_create(sample_rate, channels, application,
                                         ctypes.byref(error))
        _check(error.value, "opus_encoder_create")
        if not handle:
            raise OpusError("opus_encoder_create returned no encoder")
        self._own(handle, lib.opus_encoder_destroy)
        self._encode = lib.opus_encode
        self._out = np.zeros(MAX_PACKET_BYTES, np.uint8)
        self._out_at = self._out.ctypes.data
        # 2.5, 5, 10, 20, 40, 60, 80, 100 or 120 ms (the project sends 20 ms)
        self._frame_sizes = tuple(sample_rate * quarter // 400
                                  for quarter in (1, 2, 4, 8, 16, 24, 32, 40, 48))

    def set_bitrate(self, bits_per_second: int) -> None:
        """``OPUS_SET_BITRATE`` (500 .. 512,000 b/s)."""
        self._ctl(_SET_BITRATE, _int_in("bitrate", bits_per_second, range(500, 512_001)))

    def set_complexity(self, complexity: int) -> None:
        """``OPUS_SET_COMPLEXITY`` (0 .. 10; libopus's default is 10)."""
        self._ctl(_SET_COMPLEXITY, _int_in("complexity", complexity, range(11)))

    def set_vbr_constraint(self, constrained: bool) -> None:
        """``OPUS_SET_VBR_CONSTRAINT`` (libopus's default: constrained; FFmpeg's, and so
        PyAV's ``libopus`` codec's: not)."""
        if not isinstance(constrained, bool):
            raise OpusCodecError(f"constrained must be a bool, got {constrained!r}")
        self._ctl(_SET_VBR_CONSTRAINT, int(constrained))

    def lookahead(self) -> int:
        """``OPUS_GET_LOOKAHEAD``: the encoder's delay, in samples at its rate."""
        value = ctypes.c_int32(0)
        with self._lock:
            code = _opus().opus_encoder_ctl(self._live(), _GET_LOOKAHEAD, ctypes.byref(value))
        _check(code, "OPUS_GET_LOOKAHEAD")
        return value.value

    def _ctl(self, request: int, value: int) -> None:
        with self._lock:
            code = _opus().opus_encoder_ctl(self._live(), request, ctypes.c_int32(value))
        _check(code, f"opus_encoder_ctl({request}, {value})")

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        """One frame of interleaved s16 samples (2.5 to 120 ms at the encoder's rate) to
        its packet.

        Raises:
            OpusCodecError: not a contiguous int16 array, or not a frame's length.
            OpusError: libopus refused it.
            ResourceClosedError: after :meth:`close`.
        """
        if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16 or pcm.ndim != 1 \
                or not pcm.flags.c_contiguous:
            raise OpusCodecError("pcm must be a contiguous 1-D int16 array, got "
                                 f"{type(pcm).__name__} {getattr(pcm, 'dtype', '')}")
        samples, odd = divmod(pcm.size, self.channels)
        if odd or samples not in self._frame_sizes:
            raise OpusCodecError(f"a frame is one of {self._frame_sizes} samples a channel, "
                                 f"got {pcm.size} values for {self.channels} channel(s)")
        with self._lock:
            n = self._encode(self._live(), pcm.ctypes.data, samples, self._out_at,
                             MAX_PACKET_BYTES)
            _check(n, "opus_encode")
            return self._out[:n].tobytes()



class OpusDecoderHandle(_Handle):
    """One libopus decoder (``opus_decoder_create``) giving s16 at ``sample_rate`` with
    ``channels`` channels whatever each packet holds (libopus downmixes a stereo packet to
    mono, and resamples: 16 kHz is native to it); destroyed by :meth:`close` or when
    garbage-collected.

    Raises:
        OpusCodecError: a bad argument.
        OpusError: libopus refused to create it.
        OpusLibraryError: no libopus could be loaded.
    """

    _what = "Opus decoder"

    def __init__(self, sample_rate: int, channels: int) -> None:
        self.sample_rate = _int_in("sample_rate", sample_rate, _RATES)
        self.channels = _int_in("channels", channels, (1, 2))
        lib = _opus()
        error = ctypes.c_int(0)
        handle = lib.opus_decoder_create(sample_rate, channels, ctypes.byref(error))
        _check(error.value, "opus_decoder_create")
        if not handle:
            raise OpusError("opus_decoder_create returned no decoder")
        self._own(handle, lib.opus_decoder_destroy)
        self._decode = lib.opus_decode
        self.max_samples = sample_rate * 120 // 1000
        """Samples a channel of the longest packet (120 ms), the output buffer's size."""
        self._out = np.zeros(self.max_samples * channels, np.int16)
        self._out_at = self._out.ctypes.data

    def decode(self, packet: bytes) -> NDArray[np.int16]:
        """One packet to its interleaved s16 samples (a new array).

        Raises:
            OpusCodecError: not bytes, empty (an empty packet asks libopus to conceal a
                loss: not what a received packet means), longer than
                :data:`MAX_PACKET_BYTES`, or libopus could not decode it (corrupt,
                invalid: ``code``).
            ResourceClosedError: after :meth:`close`.
        """
        if not isinstance(packet, bytes):
            raise OpusCodecError(f"a packet must be bytes, got {type(packet).__name__}")
        if not 0 < len(packet) <= MAX_PACKET_BYTES:
            raise OpusCodecError(f"a packet is 1 to {MAX_PACKET_BYTES} bytes, "
                                 f"got {len(packet)}")
        with self._lock:
            n = self._decode(self._live(), packet, len(packet), self._out_at,
                             self.max_samples, 0)
            _check(n, "opus_decode", OpusCodecError)
            return self._out[:n * self.channels].copy()

