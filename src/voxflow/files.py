"""Input files: ``kickoff(input_files=...)`` and the turn APIs' ``input_files=``.

``input_files`` maps a name to a file given as a path (``str``/``os.PathLike``), bytes, or
a binary file object. Every file is checked before anything changes; the first bad one
raises :class:`~voxflow.errors.InputFileError` naming it:

* **Where.** A path must resolve (symlinks followed) inside one of
  :attr:`InputFilePolicy.allowed_dirs` (default: the current working directory) and be a
  regular file: no directory, device, FIFO or socket, and no symlink out of those folders.
* **How big.** At most :attr:`InputFilePolicy.max_bytes` each (5 MiB by default; a file
  that grows while read is cut off at the limit and refused), at most ``max_files`` per
  call, and not empty.
* **What.** UTF-8 text (``text/plain``; ``.md``, ``.csv``, ``.json`` names give
  ``text/markdown``, ``text/csv``, ``application/json``) or a PNG, JPEG, GIF or WEBP image,
  recognised by its content; a name ending in an image suffix must hold that image.
  Anything else (PDF, executables, Latin-1 text, ...) is refused.
* **Names.** Non-empty, at most 255 characters, no path separators or control characters.

Accepted files are stored once, by content (``<store>/ab/abcdef...``, the SHA-256 of the
bytes; :attr:`InputFilePolicy.store_dir`, default ``$VOXFLOW_HOME/files``), and are
referred to by a small :class:`FileRef` record (name, type, size, hash, stored path). A
turn's files are attached to its user message as ``ConversationMessage.files``, so a
persisted snapshot holds the records, never the content. When the history is sent to an
LLM the message's content becomes litellm multimodal parts: text files as text parts,
images as ``image_url`` parts (base64 data URLs) for models litellm says support vision,
else a text note that an image was attached.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import functools
import hashlib
import io
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from voxflow.errors import InputFileError
from voxflow.llm._litellm import load_litellm
from voxflow.paths import default_data_dir

__all__ = [
    "FileRef",
    "InputFilePolicy",
    "file_parts",
    "model_supports_vision",
    "prepare_input_files",
    "without_images",
]

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_IMAGE_SUFFIXES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_TEXT_SUFFIXES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".json": "application/json",
}
_MAX_NAME = 255


class FileRef(BaseModel):
    """One accepted input file, by reference (what messages and snapshots store)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str = Field(description="its key in input_files")
    media_type: str = Field(description="text/plain, text/markdown, ..., image/png, ...")
    size: int = Field(ge=1, description="bytes")
    sha256: str = Field(min_length=64, max_length=64, description="hex digest of the bytes")
    path: str = Field(description="where the content is stored (content-addressed)")

    @property
    def is_image(self) -> bool:
        """Whether it is an image (sent as an image part to vision models)."""
        return self.media_type.startswith("image/")

    def read_bytes(self) -> bytes:
        """The stored content, checked against its hash.

        Raises:
            InputFileError: the stored copy is gone or was changed.
        """
        try:
            data = Path(self.path).read_bytes()
        except OSError as exc:
            raise InputFileError(
                self.name, f"its stored copy is unreadable ({exc.strerror})"
            ) from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise InputFileError(self.name, "its stored copy was changed since it was attached")
        return data


@dataclasses.dataclass(frozen=True, slots=True)
class InputFilePolicy:
    """What ``input_files`` accepts (``Flow.input_file_policy``; see the module docs)."""

    max_bytes: int = 5 * 2**20
    """Largest accepted file."""
    max_files: int = 8
    """Most files per call."""
    allowed_dirs: tuple[Path, ...] | None = None
    """Folders a path may be in (with their subfolders); None: the current directory."""
    store_dir: Path | None = None
    """Where accepted files are stored; None: ``$VOXFLOW_HOME/files``."""

    def __post_init__(self) -> None:
        for field in ("max_bytes", "max_files"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"InputFilePolicy.{field} must be an int >= 1")


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise InputFileError(repr(name), "a file's name (its key) must be a string")
    if not name or len(name) > _MAX_NAME or name in (".", ".."):
        raise InputFileError(name, f"a file's name must be 1 to {_MAX_NAME} characters")
    if any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name):
        raise InputFileError(name, "a file's name may not contain / \\ or control characters")
    return name


def _open_beneath(folder: Path, path: Path) -> int:
    """Open ``path`` (resolved, inside ``folder``) one component at a time from ``folder``,
    following no symlink on the way: a folder or the file swapped for a symlink after
    ``path`` was resolved cannot lead outside ``folder``. Never blocks on a FIFO.

    Raises:
        OSError: a component is a symlink (ELOOP/ENOTDIR), missing, or unreadable.
    """
    parts = path.relative_to(folder).parts
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=directory)
            os.close(directory)
            directory = inner
        flags = os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0)
        return os.open(parts[-1], flags, dir_fd=directory)
    finally:
        os.close(directory)


def _read_path(name: str, value: str | os.PathLike[str], policy: InputFilePolicy) -> bytes:
    raw = os.fspath(value)
    if not raw or "\x00" in raw:
        raise InputFileError(name, "the path is empty or contains a NUL character")
    try:
        path = Path(raw).expanduser().resolve(strict=True)
    except FileNotFoundError:
        raise InputFileError(name, f"{raw} does not exist") from None
    except (OSError, RuntimeError) as exc:  # a symlink loop, a permission error
        raise InputFileError(name, f"{raw} cannot be resolved ({exc})") from None
    dirs = policy.allowed_dirs if policy.allowed_dirs is not None else (Path.cwd(),)
    folders = [Path(d).expanduser().resolve() for d in dirs]
    folder = next((d for d in folders if path == d or d in path.parents), None)
    if folder is None:
        raise InputFileError(
            name,
            f"{raw} is outside the allowed folders ({', '.join(str(f) for f in folders)}); "
            "pass its bytes instead, or widen Flow.input_file_policy.allowed_dirs",
        )
    try:
        fd = _open_beneath(folder, path)
    except OSError as exc:
        raise InputFileError(name, f"{raw} cannot be opened ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > policy.max_bytes:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(name, f"{raw} is not a regular file")
        raise InputFileError(name, _too_big(info.st_size, policy))
    with os.fdopen(fd, "rb") as handle:
        try:
            return handle.read(policy.max_bytes + 1)
        except OSError as exc:
            raise InputFileError(name, f"{raw} cannot be read ({exc.strerror})") from None


def _read_object(name: str, value: Any, policy: InputFilePolicy) -> bytes:
    if isinstance(value, io.TextIOBase):
        raise InputFileError(name, "a text-mode file object: open the file in binary mode ('rb')")
    try:
        data = value.read(policy.max_bytes + 1)
    except Exception as exc:
        raise InputFileError(
            name, f"reading the file object failed ({type(exc).__name__})"
        ) from None
    if isinstance(data, str):
        raise InputFileError(name, "a text-mode file object: open the file in binary mode ('rb')")
    if not isinstance(data, bytes | bytearray):
        raise InputFileError(name, f"its read() returned {type(data).__name__}, not bytes")
    return bytes(data)


def _too_big(size: int | None, policy: InputFilePolicy) -> str:
    shown = f"over {policy.max_bytes}" if size is None else str(size)
    limit = policy.max_bytes
    return f"it is {shown} bytes; the limit is {limit} (Flow.input_file_policy.max_bytes)"


def _read(name: str, value: Any, policy: InputFilePolicy) -> bytes:
    if isinstance(value, str | os.PathLike):
        data = _read_path(name, value, policy)
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    elif callable(getattr(value, "read", None)):
        data = _read_object(name, value, policy)
    else:
        raise InputFileError(
            name, f"must be a path, bytes or a binary file object, not {type(value).__name__}"
        )
    if len(data) > policy.max_bytes:  # a stream or a growing file: read up to the limit
        exact = isinstance(value, bytes | bytearray | memoryview)
        raise InputFileError(name, _too_big(len(data) if exact else None, policy))
    if not data:
        raise InputFileError(name, "it is empty")
    return data


def _sniff(name: str, data: bytes) -> str:
    image: str | None = None
    for magic, media_type in _IMAGE_MAGIC:
        if data.startswith(magic):
            image = media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        image = "image/webp"
    suffix = Path(name).suffix.lower()
    claimed = _IMAGE_SUFFIXES.get(suffix)
    if image is not None:
        if claimed is not None and claimed != image:
            raise InputFileError(name, f"its name says {claimed} but it holds {image}")
        return image
    if claimed is not None:
        raise InputFileError(name, f"its name says {claimed} but it is not such an image")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(
            name,
            "unsupported type: only UTF-8 text and PNG, JPEG, GIF or WEBP images are accepted",
        ) from None
    if "\x00" in text:
        raise InputFileError(name, "unsupported type: binary data (NUL bytes), not text")
    return _TEXT_SUFFIXES.get(suffix, "text/plain")


def _store_dir(policy: InputFilePolicy) -> Path:
    if policy.store_dir is not None:
        return Path(policy.store_dir)
    return default_data_dir() / "files"


def _store(name: str, data: bytes, digest: str, folder: Path) -> Path:
    target = folder / digest[:2] / digest
    try:
        if target.is_file() and target.stat().st_size == len(data):
            return target  # stored already: content-addressed, so it is the same bytes
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InputFileError(
            name,
            f"could not be stored in {folder} ({exc.strerror}); set VOXFLOW_HOME or "
            "Flow.input_file_policy.store_dir to a writable folder",
        ) from None
    return target


def prepare_input_files(input_files: Any, policy: InputFilePolicy) -> dict[str, FileRef]:
    """Validate every file, then store them; ``{name: FileRef}`` in the given order.

    Raises:
        TypeError: ``input_files`` is not a mapping.
        ValueError: more than ``policy.max_files`` files.
        InputFileError: a file was refused (see the module docs); nothing was stored.
    """
    if not isinstance(input_files, Mapping):
        raise TypeError(
            f"input_files must be a mapping of name -> path, bytes or binary file object, "
            f"not {type(input_files).__name__}"
        )
    if len(input_files) > policy.max_files:
        raise ValueError(
            f"input_files: {len(input_files)} files, at most {policy.max_files} per call "
            "(Flow.input_file_policy.max_files)"
        )
    checked: list[tuple[str, bytes, str, str]] = []
    for key, value in input_files.items():
        name = _check_name(key)
        data = _read(name, value, policy)
        media_type = _sniff(name, data)
        checked.append((name, data, media_type, hashlib.sha256(data).hexdigest()))
    folder = _store_dir(policy)
    refs: dict[str, FileRef] = {}
    for name, data, media_type, digest in checked:
        path = _store(name, data, digest, folder)
        refs[name] = FileRef(
            name=name, media_type=media_type, size=len(data), sha256=digest, path=str(path)
        )
    return refs


# ---------------------------------------------------------------------- LLM content


def file_parts(ref: FileRef) -> list[dict[str, Any]]:
    """litellm content parts for one file: a text part, or a label and an image part."""
    try:
        data = ref.read_bytes()
    except InputFileError as exc:
        return [{"type": "text", "text": f"[file {ref.name}: unavailable, {exc.reason}]"}]
    if ref.is_image:
        url = f"data:{ref.media_type};base64,{base64.b64encode(data).decode('ascii')}"
        return [
            {"type": "text", "text": f"[image {ref.name}]"},
            {"type": "image_url", "image_url": {"url": url}},
        ]
    text = data.decode("utf-8")
    header = f'<file name="{ref.name}" type="{ref.media_type}">'
    return [{"type": "text", "text": f"{header}\n{text}\n</file>"}]


@functools.lru_cache(maxsize=64)
def model_supports_vision(model: str) -> bool:
    """Whether litellm knows ``model`` to accept image parts (unknown models: no)."""

    try:
        return bool(load_litellm().supports_vision(model=model))
    except Exception:
        return False


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every image part replaced by a text note (for non-vision
    models); the dicts that hold no image are passed through as they are."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list) or not any(
            p.get("type") == "image_url" for p in content
        ):
            out.append(message)
            continue
        parts = [
            p
            if p.get("type") != "image_url"
            else {"type": "text", "text": "(an image is attached; this model cannot see images)"}
            for p in content
        ]
        out.append({**message, "content": parts})
    return out
