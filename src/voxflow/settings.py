"""voxflow's settings: one validated model, read from ``VOXFLOW_*`` variables at the edge.

The CLI builds :class:`Settings` with :meth:`Settings.from_env` and passes values on; an
entry point given no settings (``run_call``, the pytest plugin's fixtures, the demo, chat,
serve and phone functions) reads them the same way, so tests and production take the same
turns; other library code never reads the environment. Command-line options override the
environment, which overrides the defaults. A ``VOXFLOW_*`` variable that nothing reads
(a misspelling) is named at start-up, with the closest known one
(:meth:`Settings.unknown_variables`).

======================================  ===========================  ==================
variable                                setting                      default
======================================  ===========================  ==================
``VOXFLOW_HOME``                        ``home``                     platform data dir
``VOXFLOW_MODEL``                       ``model``                    none (rule-based)
``VOXFLOW_STT``                         ``stt``                      ``whisper:tiny.en``
``VOXFLOW_TTS``                         ``tts``                      ``piper``
``VOXFLOW_VAD``                         ``vad``                      ``silero``
``VOXFLOW_END_OF_TURN``                 ``end_of_turn``              ``none``
``VOXFLOW_END_OF_TURN_SILENCE``         ``end_of_turn_silence``      ``0.6``
``VOXFLOW_MAX_END_OF_TURN_SILENCE``     ``max_end_of_turn_silence``  ``1.6``
``VOXFLOW_RESUME_GRACE``                ``resume_grace``             ``1.0``
``VOXFLOW_COMPLETE_SILENCE``            ``complete_silence``         ``0``
``VOXFLOW_MIN_BARGE_IN``                ``min_barge_in``             ``0.3``
``VOXFLOW_SPECULATIVE_REPLIES``         ``speculative_replies``      ``true``
``VOXFLOW_DEMO_OUT``                    ``demo_out``                 ``voxflow-demo``
``VOXFLOW_HOST`` / ``VOXFLOW_PORT``     ``host`` / ``port``          ``127.0.0.1`` / 8080
``VOXFLOW_MAX_CALLS``                   ``max_calls``                none (measured)
``VOXFLOW_P95_TARGET_MS``               ``p95_target_ms``            1000
``VOXFLOW_LOG_LEVEL``                   ``log_level``                ``WARNING``
``VOXFLOW_LLM_ENDPOINTS``               ``llm_endpoints``            none
``VOXFLOW_MAX_JOB_RESULT_CHARS``        ``max_job_result_chars``     4000
``VOXFLOW_TURN_USERNAME``               ``turn_username``            none
``VOXFLOW_TURN_CREDENTIAL``             ``turn_credential``          none (secret)
``VOXFLOW_DATABASE_URL``                ``database_url``             none (SQLite)
``VOXFLOW_WEBRTC_RECEIVE_HOLD``         ``webrtc_receive_hold``      ``3``
``VOXFLOW_METRICS_HOST``                ``metrics_host``             ``127.0.0.1``
``VOXFLOW_METRICS_PORT``                ``metrics_port``             none (off)
``VOXFLOW_METRICS_TOKEN``               ``metrics_token``            none (secret)
``VOXFLOW_TRACE_CONTENT``               ``trace_content``            ``false``
======================================  ===========================  ==================

The four voice engines are chosen by name and options (:mod:`voxflow.engine_spec`:
``VOXFLOW_STT=whisper:base``); a spec is read here, its engine found when a voice command
starts. The variables of the settings they replaced (``stt_model``, ``voice``,
``end_of_turn_model``: :data:`_RENAMED`) are refused, set, with the variable that replaces
each and its value.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .endpoints import normalize_endpoints
from .engine_spec import (
    DEFAULT_ENGINES,
    ENGINE_OPTIONS,
    NO_ENGINE,
    EngineKind,
    EngineSpec,
    parse_engine_spec,
)
from .errors import EngineSpecError, VoxflowError
from .pg_url import check_database_url, redact_url

__all__ = [
    "DATABASE_URL_VARIABLE",
    "ENV_PREFIX",
    "TOOL_VARIABLES",
    "Settings",
    "SettingsError",
]

ENV_PREFIX = "VOXFLOW_"

TOOL_VARIABLES = frozenset({
    "VOXFLOW_CALLER_TOKEN",  # the scripted WebRTC caller's page token
    "VOXFLOW_BENCH_FIGURES",  # where `voxflow bench` has its scripts write their figures
    "VOXFLOW_TEST_DATABASE_URL",  # the test suite's PostgreSQL
    "VOXFLOW_BENCH_DATABASE_URL",  # the benchmarks' PostgreSQL
    "VOXFLOW_REQUIRE_POSTGRES",  # CI: a PostgreSQL test that finds no server fails
})
"""``VOXFLOW_*`` variables read by voxflow's tools and tests, not by :class:`Settings`."""

_FIXES = {
    "demo_out": "give the folder the demo writes its call to, e.g. voxflow-demo",
    "model": "give a litellm model id such as gpt-4o-mini, or leave it out (rule-based)",
    "port": "give a TCP port from 1 to 65535",
    "log_level": "use DEBUG, INFO, WARNING or ERROR",
    "log_format": "use text or json",
    "llm_timeout": "give seconds, more than 0 and at most 600",
    "llm_retries": "give a whole number from 0 to 10",
    "llm_endpoints": "give http(s)://host[:port][/path] URLs separated by commas, without "
    "credentials, query or fragment",
    "webrtc_receive_hold": "give a whole number of 20 ms packets from 0 to 15 (3: a lost "
    "packet holds the audio behind it at most 60 ms; packets in order are never held)",
    "speculative_replies": "use true or false",
    "max_end_of_turn_silence": "give seconds, more than 0.2 (the pause where the model "
    "decides) and at most 10",
    "max_calls": "give a whole number from 1 to 10000, or leave it unset (as many calls as "
    "their measured cost leaves room for)",
    "metrics_port": "give a TCP port from 1 to 65535 (0: any free port), or leave it unset "
    "(no metrics port)",
    "metrics_token": "give a random token of at least 16 characters, e.g. the output of "
    "`python3 -c 'import secrets; print(secrets.token_urlsafe())'`",
    "database_url": (
        "give postgresql://user[:password]@host[:port]/database, or unset it for the "
        "embedded SQLite store"
    ),
}


def _fix(field: str) -> str | None:
    """How to correct ``field``: its entry in ``_FIXES``, else its range read from its
    bounds ("give seconds, at least 0 and at most 3"), so a bound and its message agree."""
    if field in _FIXES:
        return _FIXES[field]
    info = Settings.model_fields.get(field)
    if info is None or info.annotation not in (int, float):
        return None
    bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le")
              if getattr(m, k, None) is not None}  # annotated_types' Ge, Gt, Le
    if "le" not in bounds or not {"ge", "gt"} & set(bounds):
        return None
    if info.annotation is int and "ge" in bounds:
        return f"give a whole number from {bounds['ge']} to {bounds['le']}"
    unit = "milliseconds" if field.endswith("_ms") else "seconds"
    low = f"at least {bounds['ge']:g}" if "ge" in bounds else f"more than {bounds['gt']:g}"
    return f"give {unit}, {low} and at most {bounds['le']:g}"


_TURN_TAKING = ("complete_silence", "max_end_of_turn_silence", "end_of_turn")
"""The settings a cross-field rule (:meth:`Settings._check_turn_taking`) names: the first
one given is the variable its error starts with."""


class SettingsError(VoxflowError, ValueError):
    """A ``VOXFLOW_*`` variable holds a value its setting cannot take."""


class Settings(BaseModel):
    """Everything a voxflow command can be configured with."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)

    home: Path | None = Field(None, description="data folder: persistence, model cache")
    model: str | None = Field(
        None, min_length=1, description="litellm model id for open questions (`--model`)"
    )
    stt: str = Field(
        DEFAULT_ENGINES["stt"], description="speech to text: an engine and its options "
        "(`--stt`), e.g. whisper:base or whisper:/path/to/model (voxflow doctor lists them)",
    )
    tts: str = Field(
        DEFAULT_ENGINES["tts"], description="text to speech (`--tts`), e.g. piper (the bundled "
        "voice) or piper:/path/to/voice.onnx",
    )
    vad: str = Field(
        DEFAULT_ENGINES["vad"], description="voice activity detection (`--vad`): silero, or "
        "energy (loudness alone, e.g. energy:threshold_db=-35)",
    )
    end_of_turn: str = Field(
        DEFAULT_ENGINES["end_of_turn"], description="end-of-turn model (`--end-of-turn`): "
        "smart-turn judges each short pause (complete: the turn ends at once; else it waits "
        "up to max_end_of_turn_silence); none: the silence alone",
    )
    end_of_turn_silence: float = Field(0.6, gt=0, le=5, description="silence (s) ending a turn")
    max_end_of_turn_silence: float = Field(  # the model decides at a 0.2 s pause
        1.6, gt=0.2, le=10, description="with an end-of-turn model: silence (s) ending a turn it "
        "judged incomplete",
    )
    resume_grace: float = Field(
        1.0, ge=0, le=3, description="speech resuming within this silence (s) after a turn "
        "ended, before any of its reply was heard, takes the turn back and makes one turn of "
        "it all (0: never)",
    )
    # 0 by eot_session.py on its tune half (Dec 4): with every turn open to a continuation
    # for continue_within (TurnDetection.continue_complete), holding a complete statement
    # 0.8 s split no fewer paused utterances (0 of 128 either way) and answered statements
    # 864 -> 286 ms (median, last word -> first reply sample, virtual time).
    complete_silence: float = Field(
        0.0, ge=0, le=10, description="with an end-of-turn model: silence (s) ending a turn it "
        "judged complete whose words do not close it (not a closed answer such as 'No, "
        "thanks.', not a question); speech before then goes on in the turn (0: at once)",
    )
    min_barge_in: float = Field(0.3, ge=0, le=5, description="speech (s) that interrupts a reply")
    speculative_replies: bool = Field(
        True, description="answer in the user's pause, spoken once the turn is confirmed"
    )
    demo_out: Path = Field(Path("voxflow-demo"), description="where `voxflow demo` writes")
    host: str = Field("127.0.0.1", description="`voxflow serve` bind address")
    port: int = Field(8080, ge=1, le=65535, description="`voxflow serve` port")
    max_calls: int | None = Field(
        None, ge=1, le=10_000, description="`voxflow serve` and `voxflow phone`: "
        "concurrent calls a process takes at most; below it, as many as the calls' measured "
        "CPU cost leaves room for (unset: no other bound); the next is refused (503; a phone "
        "call rejected busy) rather than slowing every call down",
    )
    p95_target_ms: float = Field(
        1000.0, gt=0, le=60_000, description="`voxflow serve` and `voxflow phone`: refuse "
        "calls while the recent "
        "voice-to-voice p95 (ms) is above this",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="DEBUG, INFO, WARNING or ERROR"
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as text (with time) or one JSON object per line"
    )
    llm_timeout: float = Field(
        30.0, gt=0, le=600, description="seconds an LLM request may take before it fails"
    )
    llm_retries: int = Field(
        2, ge=0, le=10, description="retries of a transient LLM failure before the first token"
    )
    llm_endpoints: tuple[str, ...] = Field(
        (), description="comma-separated http(s) URLs a flow declaration's LLMs may name as "
        "api_base/base_url (the provider's key is sent there); any other is refused",
    )
    max_job_result_chars: int = Field(
        4000, ge=1, le=1_000_000, description="the longest text a background job may "
        "return to be announced; a longer one fails the job, naming this limit",
    )
    turn_username: str | None = Field(
        None, description="`voxflow serve --ice-server turn:...`: the TURN user name"
    )
    turn_credential: SecretStr | None = Field(
        None, description="`voxflow serve --ice-server turn:...`: the TURN password (never "
        "on the command line)",
    )
    twilio_auth_token: SecretStr | None = Field(
        None, description="`voxflow phone`: the carrier account's auth token, which every "
        "webhook's signature is checked with (never on the command line, never logged)",
    )

    webrtc_receive_hold: int = Field(
        3, ge=0, le=15, description="`voxflow serve`: inbound RTP packets a "
        "lost or overtaken packet may hold before it is skipped (packets in order are "
        "decoded at once)",
    )

    database_url: SecretStr | None = Field(
        None, description="PostgreSQL session store (postgresql://…); unset: embedded SQLite"
    )

    metrics_host: str = Field(
        "127.0.0.1", min_length=1, description="`--metrics-port`: the bind address of "
        "/metrics, /health and /ready (loopback default)",
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics, /health and /ready on this port "
        "(0: any free port; unset: off)",
    )
    metrics_token: SecretStr | None = Field(
        None, min_length=16, description="a bearer token /metrics then requires (needed "
        "to bind the metrics port beyond loopback; never on the command line)",
    )
    trace_content: bool = Field(
        False, description="OpenTelemetry traces (OTEL_* variables) carry message content: "
        "prompts, answers, tool arguments and results, transcripts (off: none of it)",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, (new, form) in _RENAMED.items():
                if old in data:
                    value = data[old]
                    raise ValueError(f"{old} is replaced by {new}: give {new}="
                                     f"{_replacement(form, value)!r}")
        return data

    @field_validator("stt", "tts", "vad", "end_of_turn")
    @classmethod
    def _check_engine(cls, value: str, info: ValidationInfo) -> str:
        kind: EngineKind = info.field_name  # type: ignore[assignment]
        try:
            parse_engine_spec(value, kind)
        except EngineSpecError as exc:
            raise ValueError(exc.reason) from None
        return value

    def engine(self, kind: EngineKind) -> EngineSpec:
        """The engine of ``kind`` these settings choose, read
        (:func:`voxflow.engine_spec.parse_engine_spec`)."""
        spec: str = getattr(self, kind)
        return parse_engine_spec(spec, kind)

    @property
    def judges_end_of_turn(self) -> bool:
        """Whether an end-of-turn model judges the pauses (``end_of_turn`` is not
        ``none``)."""
        return self.engine("end_of_turn").name != NO_ENGINE

    @field_validator("demo_out", mode="before")
    @classmethod
    def _check_demo_out(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():  # Path("") would be the cwd
            raise ValueError("is empty")
        return value

    @field_validator("llm_endpoints", mode="before")
    @classmethod
    def _check_llm_endpoints(cls, value: object) -> object:
        entries = value.split(",") if isinstance(value, str) else value
        if not isinstance(entries, list | tuple):
            return value  # (the type's own error)
        normalized = normalize_endpoints(
            (e for e in entries if not isinstance(e, str) or e.strip()),
            lambda i: f"entry {i + 1}")
        return tuple(dict.fromkeys(normalized))

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_database_url(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _check_turn_taking(self) -> Settings:
        if self.judges_end_of_turn and self.complete_silence > self.max_end_of_turn_silence:
            raise ValueError(
                f"VOXFLOW_COMPLETE_SILENCE ({self.complete_silence}) is longer than "
                f"VOXFLOW_MAX_END_OF_TURN_SILENCE ({self.max_end_of_turn_silence}): a turn "
                "judged complete cannot wait longer than one judged incomplete; lower "
                "VOXFLOW_COMPLETE_SILENCE or raise VOXFLOW_MAX_END_OF_TURN_SILENCE")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``VOXFLOW_*`` variables (``os.environ`` if ``environ`` is None).

        Raises:
            SettingsError: a variable's value is invalid; the message names the variable.
        """
        env = os.environ if environ is None else environ
        for old, (new, form) in _RENAMED.items():
            raw = env.get(ENV_PREFIX + old.upper())
            if raw is not None and raw.strip() != "":
                raise SettingsError(
                    f"{ENV_PREFIX}{old.upper()} is replaced by {ENV_PREFIX}{new.upper()}: "
                    f"set {ENV_PREFIX}{new.upper()}={_replacement(form, raw.strip())!r} and "
                    f"unset {ENV_PREFIX}{old.upper()}")
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw.strip() != "":
                value = raw.strip()
                values[name] = {"log_level": value.upper(), "log_format": value.lower()}.get(
                    name, value
                )
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else next(
                (name for name in _TURN_TAKING if name in values), _TURN_TAKING[0])
            fix = _fix(field) if first["loc"] else None
            raise SettingsError(
                f"{ENV_PREFIX}{field.upper()}={_shown(field, values.get(field))!r}: "
                f"{first['msg'].removeprefix('Value error, ')}" + (f"; {fix}" if fix else "")
            ) from None

    def with_options(self, **options: Any) -> Settings:
        """These settings with command-line values (None: not given) over them.

        Raises:
            SettingsError: a value is invalid; the message names the option
                (``--log-level``).
        """
        given = {k: v for k, v in options.items() if v is not None}
        try:
            return type(self).model_validate({**self.model_dump(), **given})
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "?"
            flags: dict[str, str] = {"demo_out": "--out"} | dict(ENGINE_OPTIONS.items())
            flag = flags.get(field, "--" + field.replace("_", "-"))
            fix = _fix(field)
            raise SettingsError(
                f"{flag} {_shown(field, given.get(field))!r}: "
                f"{first['msg'].removeprefix('Value error, ')}"
                + (f"; {fix}" if fix else "")
            ) from None

    @staticmethod
    def describe() -> list[tuple[str, str, str]]:
        """(variable, meaning, default) for every setting, for ``--help`` and the README."""
        rows = []
        for name, info in Settings.model_fields.items():
            default = info.default
            shown = "none" if default in (None, ()) else str(default)
            rows.append((ENV_PREFIX + name.upper(), info.description or "", shown))
        return rows

    @staticmethod
    def variables() -> dict[str, str]:
        """``VOXFLOW_*`` variable → setting name, for docs and ``doctor``."""
        return {ENV_PREFIX + name.upper(): name for name in Settings.model_fields}

    @staticmethod
    def tool_variables() -> frozenset[str]:
        """The ``VOXFLOW_*`` variables voxflow's tools and tests read (no setting)."""
        return TOOL_VARIABLES

    @staticmethod
    def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
        """One line per ``VOXFLOW_*`` variable (in any case) that nothing reads, such as
        a misspelt setting's: its name and the closest known one. The CLI logs them as
        warnings at start-up; values are never shown (one may be a secret).

        Args:
            environ: the variables (``os.environ`` if None).
        """
        env = os.environ if environ is None else environ
        known = sorted(Settings.variables()) + sorted(TOOL_VARIABLES)
        lines = []
        for name in sorted(env):
            if not name.upper().startswith(ENV_PREFIX) or name in known:
                continue
            shown = name if name.isprintable() and len(name) <= 100 else repr(name[:100])
            close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.6)
            hint = (f"did you mean {close[0]}?" if close else
                    "`voxflow COMMAND --help` lists the variables")
            lines.append(f"{shown} is not a voxflow variable, so it is ignored: {hint}")
        return lines


_RENAMED: dict[str, tuple[str, str]] = {
    "stt_model": ("stt", "whisper:{}"),
    "voice": ("tts", "piper:{}"),
    "end_of_turn_model": ("end_of_turn", "{}"),
}
"""Settings replaced by an engine spec: the new setting, and the spec an old value
becomes."""


def _replacement(form: str, value: object) -> str:
    """The spec an old setting's ``value`` becomes (``base`` → ``whisper:base``)."""
    return form.format(str(value).strip())


def _shown(field: str, value: Any) -> Any:
    """A rejected value as an error message may show it (a URL without its password)."""
    if field == "database_url" and isinstance(value, str):
        return redact_url(value)
    if field == "llm_endpoints" and isinstance(value, str):
        return re.sub(r"//[^/,]*@", "//***@", value)
    if field in ("metrics_token", "turn_credential") and value is not None:
        return "<hidden>"
    return value


DATABASE_URL_VARIABLE = "VOXFLOW_DATABASE_URL"
"""The environment variable that selects PostgreSQL persistence."""
