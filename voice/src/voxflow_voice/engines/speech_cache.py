"""Speech said again is synthesized once: a bounded cache of synthesized sentences.

A voice assistant says the same sentences over and over: greetings, confirmations,
fillers, an announcement's fixed part, a flow's constant replies. :class:`SpeechCache`
keeps the audio and word timings of each sentence a TTS engine synthesized, keyed by
what fixes the audio (the voice, its settings and the sentence's phonemes), so the next
time the sentence is said it costs a dictionary lookup instead of a model run. The audio
then goes through the same chunking, identity tags and fenced playout as fresh speech:
only where the samples come from differs.

The memory part is an LRU bounded in bytes and shared by every call of a process (the
engines are). An optional directory keeps sentences across restarts and across the
worker processes of one machine; a file there is read as untrusted input (a damaged,
truncated or foreign file is a miss, never an error) and written atomically, and the
directory is bounded too (the oldest files go first).

With sampling noise on (Piper's default outside tests), a cached sentence repeats one
rendition of it, as a recording would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..audio import WordTiming

__all__ = ["CacheStatistics", "SpeechCache"]

logger = logging.getLogger(__name__)

_SUFFIX = ".voxspeech.npz"
_MAX_FILE_BYTES = 64 * 1024 * 1024  # one sentence's audio, with room to spare


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """What a :class:`SpeechCache` has served.

    Attributes:
        hits: sentences served from memory or disk.
        misses: sentences the engine had to synthesize.
        disk_hits: of the hits, those read from the directory.
        entries: sentences in memory now.
        bytes: their audio's size in memory.
    """

    hits: int
    misses: int
    disk_hits: int
    entries: int
    bytes: int

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class SpeechCache:
    """Synthesized sentences by key, bounded in memory (and on disk, if a directory is
    given). Thread-safe: the engine synthesizes in executor threads.

    Args:
        max_bytes: memory for the audio (the least recently used sentence goes first);
            0 keeps nothing in memory.
        directory: where sentences are also kept across restarts (created if missing);
            ``None`` for memory only.
        max_disk_bytes: the directory's bound (the oldest files go first).
        identity: what the key is prefixed with: the voice and its settings (a sentence of
            another voice or speed never matches).
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        directory: str | os.PathLike[str] | None = None,
        max_disk_bytes: int = 256 * 1024 * 1024,
        identity: str = "",
    ) -> None:
        if max_bytes < 0 or max_disk_bytes < 0:
            raise ValueError("a speech cache's bounds must be >= 0 bytes")
        self.max_bytes = max_bytes
        self.max_disk_bytes = max_disk_bytes
        self._identity = identity
        self._dir = Path(directory) if directory is not None else None
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[NDArray[np.float32], tuple[WordTiming, ...]]]
        self._entries = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._disk_hits = 0

    def key(self, parts: Sequence[object]) -> str:
        """The key of a sentence made of ``parts`` (its phoneme ids and words, say)."""
        digest = hashlib.sha256(self._identity.encode())
        for part in parts:
            digest.update(b"\x1f" + repr(part).encode())
        return digest.hexdigest()

    def get(self, key: str) -> tuple[NDArray[np.float32], tuple[WordTiming, ...]] | None:
        """The sentence's samples (read-only) and word timings, or None (counted as a
        miss: the caller synthesizes it and :meth:`put` s it)."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return found
        found = self._read(key)
        with self._lock:
            if found is None:
                self._misses += 1
                return None
            self._hits += 1
            self._disk_hits += 1
            self._remember(key, found)
        return found

    def put(self, key: str, samples: NDArray[np.float32], words: tuple[WordTiming, ...]) -> None:
        """Keep a synthesized sentence (its samples are copied and made read-only)."""
        kept = np.array(samples, dtype=np.float32, copy=True).reshape(-1)
        kept.flags.writeable = False
        with self._lock:
            self._remember(key, (kept, tuple(words)))
        self._write(key, kept, words)

    def statistics(self) -> CacheStatistics:
        """Hits, misses and what memory holds."""
        with self._lock:
            return CacheStatistics(self._hits, self._misses, self._disk_hits,
                                   len(self._entries), self._bytes)

    def _remember(self, key: str,
                  entry: tuple[NDArray[np.float32], tuple[WordTiming, ...]]) -> None:
        size = entry[0].nbytes
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[0].nbytes
        self._entries[key] = entry
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (dropped, _) = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes

    # -- the directory ------------------------------------------------------------------

    def _path(self, key: str) -> Path | None:
        return None if self._dir is None else self._dir / f"{key}{_SUFFIX}"

    def _read(self, key: str) -> tuple[NDArray[np.float32], tuple[WordTiming, ...]] | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            if path.stat().st_size > _MAX_FILE_BYTES:
                return None
            data = path.read_bytes()
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                samples = np.asarray(archive["samples"], dtype=np.float32).reshape(-1)
                words = [str(w) for w in archive["words"].tolist()]
                spans = np.asarray(archive["spans"], dtype=np.int64).reshape(-1, 2)
            if len(words) != len(spans) or not np.all(np.isfinite(samples)):
                return None
            if spans.size and (spans.min() < 0 or spans.max() > samples.size):
                return None
            samples.flags.writeable = False
            timings = tuple(WordTiming(w, int(a), int(b))
                            for w, (a, b) in zip(words, spans, strict=True))
            os.utime(path)  # recently used: the directory's bound keeps it
            return samples, timings
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged or foreign file: a miss, said once
            logger.info("speech cache: %s is unreadable (%s); synthesizing instead",
                        path.name, type(exc).__name__)
            return None

    def _write(self, key: str, samples: NDArray[np.float32],
               words: Sequence[WordTiming]) -> None:
        path = self._path(key)
        if path is None or samples.nbytes > _MAX_FILE_BYTES // 2:
            return
        assert self._dir is not None
        buffer = io.BytesIO()
        np.savez(buffer, samples=samples,
                 words=np.array([w.word for w in words], dtype=np.str_),
                 spans=np.array([(w.start, w.end) for w in words], dtype=np.int64)
                 .reshape(-1, 2))
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                out.write(buffer.getvalue())
            os.replace(tmp, path)
            tmp = None
            self._trim_directory()
        except OSError as exc:  # a full or read-only disk: memory still serves
            logger.info("speech cache: could not keep %s on disk (%s)", path.name,
                        type(exc).__name__)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _trim_directory(self) -> None:
        assert self._dir is not None
        files = []
        for entry in os.scandir(self._dir):
            if entry.name.endswith(_SUFFIX):
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                files.append((stat.st_mtime, stat.st_size, entry.path))
        total = sum(size for _, size, _ in files)
        for _, size, name in sorted(files):
            if total <= self.max_disk_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            total -= size
