"""The voice engines' errors, on voxflow's tree (:mod:`voxflow.errors`)::

    VoxflowError
    + ModelNotFoundError         a bundled model package is missing; names the package to install
    + EngineError                (voxflow.errors) a voice engine could not be chosen by name
      + EngineContractError        an installed engine broke the protocol (what it yielded)
      + EngineLoadError            its entry point fails to load or names no engine factory
        + EngineWarmUpError          it loaded, but its warm-up run failed (also RuntimeError)
"""

from __future__ import annotations

from voxflow.errors import EngineError, VoxflowError

__all__ = ["EngineContractError", "EngineLoadError", "EngineWarmUpError", "ModelNotFoundError"]


class ModelNotFoundError(VoxflowError, LookupError):
    """A model is not installed; the message names the package that provides it.

    Attributes:
        package: the PyPI distribution to install, when one provides the model.
    """

    def __init__(self, message: str, *, package: str | None = None) -> None:
        super().__init__(message)
        self.package = package


class EngineContractError(EngineError):
    """An engine broke the protocol it is used through (a TTS's ``stream`` or
    ``synthesize`` yielded something else than the protocol's chunks or sentences). Its
    ``reason`` names the engine, what it yielded and the fix (update its package or
    report it to its author)."""


class EngineLoadError(EngineError):
    """The entry point registering the name cannot be loaded, or what it names is not an
    engine factory of that kind (a broken or outdated package: reinstall it)."""


class EngineWarmUpError(EngineLoadError, RuntimeError):
    """An engine loaded, but its warm-up run (``VoiceEngines.warm_up``, before the first
    call) showed it does not work: its step raised (that error is its ``__cause__``), or
    the TTS said nothing of the warm-up text. The message, one line, names the engine and
    the fix."""
