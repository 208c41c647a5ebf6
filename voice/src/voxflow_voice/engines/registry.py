"""Voice engines by name: the entry points of ``voxflow.stt``, ``voxflow.tts``,
``voxflow.vad`` and ``voxflow.end_of_turn``.

An installed package registers an engine by naming an :class:`EngineFactory` in one of
those groups of its ``pyproject.toml``; voxflow-voice registers its own that way (Whisper,
Piper, Silero and the energy VAD, Smart Turn)::

    [project.entry-points."voxflow.stt"]
    whisper = "voxflow_voice.engines.stt:WHISPER_ENGINE"

A spec (:mod:`voxflow.engine_spec`: ``whisper:base,beam_size=2``) chooses one:
:func:`choose_engine` finds the name among the installed entry points, loads the entry
point, checks that it is an engine factory of that kind and validates the options with
the factory's pydantic model, all without loading a model; :meth:`ChosenEngine.create`
then builds the engine and checks that it has what its kind must have. Every refusal is
an :class:`~voxflow.errors.EngineError` of one line naming what was wrong, the names
installed and the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from voxflow.engine_spec import (
    ENGINE_GROUPS,
    ENGINE_KINDS,
    ENGINE_LABELS,
    NO_ENGINE,
    EngineKind,
    EngineSpec,
    parse_engine_spec,
)
from voxflow.errors import EngineError, EngineOptionsError, UnknownEngineError, VoxflowError
from voxflow.ids import DeliveryId
from voxflow.plugins import declared

from ..audio import ReplyChunk
from ..scheduler import ModelScheduler
from .errors import EngineContractError, EngineLoadError
from .rates import ModelRates

__all__ = [
    "ChosenEngine",
    "EngineContext",
    "EngineFactory",
    "InstalledEngine",
    "check_spoken",
    "choose_engine",
    "doctor_checks",
    "installed_engines",
    "installed_from",
]

E = TypeVar("E")

_REQUIRED: dict[EngineKind, tuple[str, ...]] = {
    "stt": ("transcribe",),
    "tts": ("sample_rate", "stream", "synthesize"),
    "vad": ("sample_rate", "frame_samples", "process_frames", "reset"),
    "end_of_turn": ("probability",),
}
"""What an engine of each kind must have (the methods of its interface, and the
properties ``sample_rate`` and ``frame_samples``)."""
_PROPERTIES = frozenset({"sample_rate", "frame_samples"})


@dataclass(frozen=True, slots=True)
class EngineContext:
    """What a process gives every engine it builds.

    Attributes:
        scheduler: runs model work deadline first
            (:class:`~voxflow_voice.scheduler.ModelScheduler`); ``None``: a
            default-executor thread per job.
        deterministic: synthesize without sampling noise (tests, scripted speech): the
            same text, the same samples.
        rates: where an engine records each job's seconds and its audio's
            (:class:`~voxflow_voice.engines.rates.ModelRates`); ``None``: nowhere.
    """

    scheduler: ModelScheduler | None = None
    deterministic: bool = False
    rates: ModelRates | None = None


@dataclass(frozen=True, slots=True)
class EngineFactory(Generic[E]):
    """How an engine of one kind is built from its options: what an entry point of
    ``voxflow.stt`` (``tts``, ``vad``, ``end_of_turn``) names.

    Attributes:
        kind: ``stt``, ``tts``, ``vad`` or ``end_of_turn``: the group it is registered in.
        build: ``build(options, context)`` loads the model and returns the engine (an
            instance of ``options``, or ``None`` when the factory takes none). A VAD
            factory is called once per session (a detector holds one stream's state).
        options: a pydantic model of the options it takes (the spec's values arrive as
            text; pydantic converts them); ``None``: it takes none.
        main_option: the option a value given without a name sets (``model`` for
            ``whisper:base``); ``None``: every option is given by name.
        summary: what it is, in a few words (``voxflow doctor``).
        models: where its model comes from (``voxflow doctor``).
    """

    kind: EngineKind
    build: Callable[[Any, EngineContext], E]
    options: type[BaseModel] | None = None
    main_option: str | None = None
    summary: str = ""
    models: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {self.kind!r}")
        if not callable(self.build):
            raise TypeError(f"build must be callable, got {type(self.build).__name__}")
        if self.options is not None and not (
                isinstance(self.options, type) and issubclass(self.options, BaseModel)):
            raise TypeError(f"options must be a pydantic model class, got {self.options!r}")
        if self.main_option is not None and (
                self.options is None or self.main_option not in self.options.model_fields):
            raise ValueError(f"main_option {self.main_option!r} is not one of the options")

    def option_names(self) -> list[str]:
        """The options it takes, the main one first."""
        names = list(self.options.model_fields) if self.options is not None else []
        if self.main_option is not None:
            names.remove(self.main_option)
            names.insert(0, self.main_option)
        return names


@dataclass(frozen=True, slots=True)
class InstalledEngine:
    """An engine an installed package registers (its entry point, not loaded).

    Attributes:
        kind: its kind.
        name: the name a spec chooses it by.
        target: what the entry point names (``module:attribute``).
        package: the distribution that registers it, with its version.
        also: other distributions registering the same name (a conflict: it cannot be
            chosen until one is uninstalled).
    """

    kind: EngineKind
    name: str
    target: str
    package: str
    entry: EntryPoint = field(repr=False, compare=False)
    also: tuple[str, ...] = ()

    @property
    def described(self) -> str:
        """It as an error names it: ``'mine' (my_engines:tts from my-engines 1.0)``."""
        return f"{self.name!r} ({self.target} from {self.package})"

    @property
    def distribution(self) -> str:
        """The name of the distribution that registers it."""
        return self.package.split()[0]

    @property
    def fix(self) -> str:
        """What a user types when it cannot be loaded."""
        if self.also:
            return f"pip uninstall {' or '.join(p.split()[0] for p in self.also)}"
        return f"reinstall it: pip install --force-reinstall {self.distribution}"

    def load(self) -> EngineFactory[Any]:
        """Load the entry point and check it is a factory of its kind.

        Raises:
            EngineLoadError: it cannot be imported or loaded, names something that is not
                an :class:`EngineFactory`, or one of another kind; or two packages
                register the name.
        """
        label = ENGINE_LABELS[self.kind]
        who = f"{self.name!r} ({self.target} from {self.package})"
        if self.also:
            reason = (f"{self.name!r} is registered by {self.package} and by "
                      f"{', '.join(self.also)}: uninstall all but one")
            raise EngineLoadError(f"{label} engine {reason}", kind=self.kind, reason=reason)
        try:
            loaded = self.entry.load()
        except Exception as exc:  # a broken package: said, never a traceback
            reason = (f"{who} cannot be loaded ({type(exc).__name__}: {_one_line(exc)}); "
                      f"{self.fix}")
            raise EngineLoadError(f"{label} engine {reason}", kind=self.kind,
                                  reason=reason) from None
        if not isinstance(loaded, EngineFactory):
            reason = (f"{who} is not an engine factory (it is {_kind_of(loaded)}): the entry "
                      f"point must name a voxflow_voice.engines.EngineFactory; {self.fix}")
            raise EngineLoadError(f"{label} engine {reason}", kind=self.kind, reason=reason)
        if loaded.kind != self.kind:
            reason = (f"{who} is a {ENGINE_LABELS[loaded.kind]} engine registered as {label} "
                      f"({ENGINE_GROUPS[self.kind]}): move it to {ENGINE_GROUPS[loaded.kind]}"
                      f" in {self.distribution}'s pyproject.toml")
            raise EngineLoadError(f"{label} engine {reason}", kind=self.kind, reason=reason)
        return loaded


def installed_engines(kind: EngineKind) -> dict[str, InstalledEngine]:
    """The engines of ``kind`` installed packages register, by name (sorted); nothing is
    loaded.

    Raises:
        ValueError: ``kind`` is not one of :data:`voxflow.engine_spec.ENGINE_KINDS`.
    """
    if kind not in ENGINE_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {kind!r}")
    found: dict[str, InstalledEngine] = {}
    for entry, dist, version in sorted(declared(ENGINE_GROUPS[kind]),
                                       key=lambda d: d.entry.name):
        package = f"{dist} {version}" if dist != "?" else "an unknown package"
        known = found.get(entry.name)
        if known is None:
            found[entry.name] = InstalledEngine(kind, entry.name, entry.value, package, entry)
        elif package != known.package and package not in known.also:
            found[entry.name] = InstalledEngine(kind, entry.name, known.target, known.package,
                                                known.entry, (*known.also, package))
    return found


@dataclass(frozen=True, slots=True)
class ChosenEngine(Generic[E]):
    """An engine a spec chose, its options validated; nothing loaded yet.

    Attributes:
        spec: the spec read.
        factory: the registered factory.
        options: its options (an instance of ``factory.options``), or ``None``.
        installed: the entry point it came from (``None``: a factory given directly).
    """

    spec: EngineSpec
    factory: EngineFactory[E]
    options: BaseModel | None
    installed: InstalledEngine | None = None

    def create(self, context: EngineContext | None = None) -> E:
        """Build the engine (blocking: it loads the model).

        Raises:
            EngineLoadError: the factory built something that lacks what its kind must
                have (``transcribe``, ``probability``...).
            .errors.ModelNotFoundError: the model is not installed (the message
                names the package).
        """
        try:
            engine = self.factory.build(self.options, context or EngineContext())
        except VoxflowError:
            raise  # (a missing model names its package: ModelNotFoundError)
        except Exception as exc:  # a bug in the engine's package: one line, not its traceback
            raise self._failed(f"failed to build ({type(exc).__name__}: {_one_line(exc)})"
                               ) from exc
        lacks = [name for name in _REQUIRED[self.spec.kind]
                 if not hasattr(engine, name)
                 or (name not in _PROPERTIES and not callable(getattr(engine, name)))]
        if lacks:
            raise self._failed(f"built {_kind_of(engine)}, which has no {', '.join(lacks)}: "
                               f"not a {ENGINE_LABELS[self.spec.kind]} engine")
        if (self.spec.kind == "tts" and self.installed is not None
                and self.installed.distribution != "voxflow-voice"):
            return _CheckedTts(engine, self.installed)  # type: ignore[return-value]
        return engine

    def _failed(self, why: str) -> EngineLoadError:
        """The error of an engine that could not be built: ``why``, its package, the fix."""
        kind = self.spec.kind
        installed = installed_engines(kind)
        source = f" (from {self.installed.package})" if self.installed else ""
        owner = self.installed.distribution if self.installed else "its author"
        check = "check its options (a model file or folder it cannot read?), " if (
            self.spec.value is not None or self.spec.options) else ""
        reason = (f"{why}; {check}fix it or report it to {owner}, or choose another engine "
                  f"(installed: {', '.join(installed) or 'none'})")
        return EngineLoadError(f"{ENGINE_LABELS[kind]} engine {str(self.spec)!r}{source} "
                               f"{reason}", kind=kind, reason=f"{source.strip()} {reason}".strip(),
                               available=tuple(installed))

    def __str__(self) -> str:
        return str(self.spec)


def choose_engine(
    kind: EngineKind, spec: str | EngineSpec, options: BaseModel | None = None
) -> ChosenEngine[Any]:
    """The installed engine of ``kind`` that ``spec`` names, with its options validated
    (nothing is loaded: call :meth:`ChosenEngine.create`).

    Args:
        kind: ``stt``, ``tts``, ``vad`` or ``end_of_turn``.
        spec: ``NAME`` or ``NAME:OPTIONS`` (:func:`voxflow.engine_spec.parse_engine_spec`).
        options: the engine's options, built already (an instance of its factory's
            ``options``); then ``spec`` is the name alone.

    Raises:
        voxflow.errors.EngineSpecError: ``spec`` is malformed, or is ``none``.
        voxflow.errors.UnknownEngineError: no installed package registers the name (the
            message lists the names installed).
        voxflow_voice.engines.errors.EngineLoadError: its entry point cannot be loaded, or is not an
            engine factory of ``kind``.
        voxflow.errors.EngineOptionsError: an option it does not take (the message lists
            those it does), or a value it refuses.
    """
    read = spec if isinstance(spec, EngineSpec) else parse_engine_spec(spec, kind)
    label = ENGINE_LABELS[kind]
    if read.kind != kind:
        raise ValueError(f"spec is a {ENGINE_LABELS[read.kind]} spec, not a {label} one")
    if read.name == NO_ENGINE and kind == "end_of_turn":
        raise ValueError("'none' chooses no end-of-turn engine: there is nothing to load")
    installed = installed_engines(kind)
    entry = installed.get(read.name)
    if entry is None:
        names = tuple(installed)
        close = difflib.get_close_matches(read.name, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        reason = (f"no installed package registers {read.name!r} ({ENGINE_GROUPS[kind]}); "
                  f"{hint}installed: {', '.join(names) or 'none'} (install the package "
                  "that provides it, or choose one of those)")
        raise UnknownEngineError(f"{label} engine {str(read)!r}: {reason}", kind=kind,
                                 reason=reason, available=names)
    factory = entry.load()
    return ChosenEngine(read, factory, _options(read, factory, options), entry)


_TTS_CONTRACT = ("stream must yield voxflow_voice.audio.ReplyChunk carrying the "
                 "delivery_id and segment_id it was given")
_SYNTHESIZE_CONTRACT = ("synthesize must yield sentences with .samples (float32 at "
                        "sample_rate) and .words (voxflow_voice.engines.SpokenSentence)")


def check_spoken(sentence: object, who: str, owner: str) -> None:
    """Check that ``sentence``, the first a TTS engine's ``synthesize`` yielded, is a
    ``SpokenSentence`` (it has ``samples`` and ``words``): ``who`` names the engine,
    ``owner`` its package. The one check of it, for an installed plug-in
    (:class:`_CheckedTts`) and for an engine given directly (the warm-up's).

    Raises:
        EngineContractError: it is not one (the reason says what it is and the fix).
    """
    if hasattr(sentence, "samples") and hasattr(sentence, "words"):
        return
    reason = (f"{who} yielded {_kind_of(sentence)}: {_SYNTHESIZE_CONTRACT}; update {owner} "
              "or report it to its author")
    raise EngineContractError(f"{ENGINE_LABELS['tts']} engine {reason}", kind="tts",
                              reason=reason)


def installed_from(engine: object) -> InstalledEngine | None:
    """The entry point ``engine`` came from, where it was built from another package's
    (its TTS, checked: :meth:`ChosenEngine.build`); ``None`` otherwise."""
    return engine.installed if isinstance(engine, _CheckedTts) else None


class _CheckedTts:
    """A TTS engine of another package whose ``stream``'s first chunk, and
    ``synthesize``'s first sentence, are checked against the contract: one written to an
    older one (yielding ``AudioChunk``, or bare arrays) is then refused at the first reply
    (or the warm-up, or a scripted line) with an :class:`EngineError` naming its package,
    not a ``TypeError`` or ``AttributeError`` deep in the playout. mypy proves
    voxflow-voice's own engines; an installed package it never saw. After the first
    chunk or sentence, the rest pass unchecked."""

    __slots__ = ("_engine", "_installed")

    def __init__(self, engine: Any, installed: InstalledEngine) -> None:
        self._engine = engine
        self._installed = installed

    @property
    def sample_rate(self) -> int:
        return int(self._engine.sample_rate)

    def synthesize(self, text: str) -> Iterator[Any]:
        sentences = self._engine.synthesize(text)
        try:
            checked = False
            for sentence in sentences:
                if not checked:
                    check_spoken(sentence, self._installed.described,
                                 self._installed.distribution)
                    checked = True
                yield sentence
        finally:
            close = getattr(sentences, "close", None)
            if close is not None:
                close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)  # (what else the engine offers)

    @property
    def installed(self) -> InstalledEngine:
        """The entry point the engine came from."""
        return self._installed

    def _broken(self, why: str) -> EngineError:
        who = self._installed.described
        reason = (f"{who} {why}: {_TTS_CONTRACT}; update {self._installed.distribution} "
                  "or report it to its author")
        return EngineContractError(f"{ENGINE_LABELS['tts']} engine {reason}", kind="tts",
                                   reason=reason)

    async def stream(self, text: str, *, delivery_id: DeliveryId,
                     segment_id: int) -> AsyncIterator[ReplyChunk]:
        chunks = self._engine.stream(text, delivery_id=delivery_id, segment_id=segment_id)
        try:
            try:
                first = await anext(aiter(chunks))
            except StopAsyncIteration:
                return
            except TypeError as exc:  # (AudioChunk(..., delivery_id=...) of an old engine)
                raise self._broken(f"failed before its first chunk ({_one_line(exc)})"
                                   ) from exc
            if (not isinstance(first, ReplyChunk) or first.delivery_id != delivery_id
                    or first.segment_id != segment_id):
                got = (f"a ReplyChunk of {first.delivery_id!r}, segment {first.segment_id}"
                       if isinstance(first, ReplyChunk) else _kind_of(first))
                raise self._broken(f"yielded {got}")
            yield first
            async for chunk in chunks:
                yield chunk
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()


def _options(spec: EngineSpec, factory: EngineFactory[Any],
             given: BaseModel | None) -> BaseModel | None:
    """``spec``'s options validated by ``factory`` (or ``given``, already built)."""
    label = ENGINE_LABELS[spec.kind]

    def refuse(why: str, *, listing: bool = True) -> EngineOptionsError:
        takes = factory.option_names()
        listed = (f"its options: {', '.join(takes)}"
                  + (f" (a first value without a name is {factory.main_option})"
                     if factory.main_option else "") if takes
                  else f"it takes none: give {spec.name} alone")
        reason = f"{why}; {listed}" if listing else why
        return EngineOptionsError(f"{label} engine {str(spec)!r}: {reason}", kind=spec.kind,
                                  reason=reason)

    if given is not None:
        if spec.value is not None or spec.options:
            raise ValueError("give the options either in the spec or as options=, not both")
        if factory.options is None or not isinstance(given, factory.options):
            raise refuse(f"{spec.name} does not take {type(given).__name__} options")
        return given
    values = dict(spec.options)
    if spec.value is not None:
        if factory.main_option is None:
            raise refuse(f"{spec.name} takes no value without a name ({spec.value!r})")
        if factory.main_option in values:
            raise refuse(f"{factory.main_option} is given twice (first, and by name)")
        values = {factory.main_option: spec.value, **values}
    if factory.options is None:
        if values:
            raise refuse(f"{spec.name} takes no options")
        return None
    fields = factory.options.model_fields
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            raise refuse(f"{spec.name} takes no option {key!r}"
                         + (f" (did you mean {close[0]}?)" if close else ""))
    try:
        return factory.options.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = first["loc"][0] if first["loc"] else None
        shown = f"{where}={values[where]!r}" if isinstance(where, str) and where in values else (
            "its options")
        said = _one_line(first["msg"]).removeprefix("Value error, ")
        raise refuse(f"{shown}: {said}", listing=False) from None
    except Exception as exc:  # a validator of the package's own that raised otherwise
        raise refuse(f"its options were refused ({type(exc).__name__}: {_one_line(exc)})"
                     ) from None


def _one_line(text: object, limit: int = 200) -> str:
    """``text`` on one line, printable, at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    flat = "".join(c if c.isprintable() else "?" for c in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _kind_of(value: object) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def doctor_checks() -> list[tuple[str, str, str, str]]:
    """``voxflow doctor``'s rows for the installed engines (its ``voxflow.doctor`` entry
    point): ``(check, status, detail, fix)``, one per engine, the default marked. An
    engine whose entry point cannot be loaded is a warning with its fix."""
    from voxflow.engine_spec import DEFAULT_ENGINES  # (only the doctor marks the defaults)

    rows: list[tuple[str, str, str, str]] = []
    for kind in ENGINE_KINDS:
        default = parse_engine_spec(DEFAULT_ENGINES[kind], kind).name
        for name, installed in installed_engines(kind).items():
            check = f"{ENGINE_LABELS[kind]} engine {name}" + (
                " (default)" if name == default else "")
            try:
                factory = installed.load()
            except EngineError as exc:
                rows.append((check, "warning", exc.reason, installed.fix.removeprefix(
                    "reinstall it: ")))
                continue
            detail = "; ".join(part for part in (
                installed.package, factory.summary, f"model: {factory.models}"
                if factory.models else "", _options_hint(factory)) if part)
            rows.append((check, "ok", detail, ""))
    return rows


def _options_hint(factory: EngineFactory[Any]) -> str:
    names = factory.option_names()
    return f"options: {', '.join(names)}" if names else ""

