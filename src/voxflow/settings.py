"""voxflow's settings: validated models, read from ``VOXFLOW_*`` variables at the edge.

The CLI builds :class:`Settings` with :meth:`Settings.from_env` and passes values on; an
entry point given no settings (``run_call``, the pytest plugin's fixtures, the demo, chat,
serve and phone functions) reads them the same way, so tests and production take the same
turns; other library code never reads the environment. Command-line options override the
environment, which overrides the defaults. A ``VOXFLOW_*`` variable that nothing reads
(a misspelling) is named at start-up, with the closest known one
(:meth:`Settings.unknown_variables`).

:class:`Settings` holds the core's own settings:

======================================  ===========================  ==================
variable                                setting                      default
======================================  ===========================  ==================
``VOXFLOW_HOME``                        ``home``                     platform data dir
``VOXFLOW_MODEL``                       ``model``                    none (rule-based)
``VOXFLOW_DEMO_OUT``                    ``demo_out``                 ``voxflow-demo``
``VOXFLOW_LOG_LEVEL``                   ``log_level``                ``WARNING``
``VOXFLOW_LLM_ENDPOINTS``               ``llm_endpoints``            none
``VOXFLOW_MAX_JOB_RESULT_CHARS``        ``max_job_result_chars``     4000
``VOXFLOW_DATABASE_URL``                ``database_url``             none (SQLite)
``VOXFLOW_METRICS_HOST``                ``metrics_host``             ``127.0.0.1``
``VOXFLOW_METRICS_PORT``                ``metrics_port``             none (off)
``VOXFLOW_METRICS_TOKEN``               ``metrics_token``            none (secret)
``VOXFLOW_TRACE_CONTENT``               ``trace_content``            ``false``
======================================  ===========================  ==================

Installed packages add sections of their own (:class:`SettingsSection`): voxflow-voice the
engines and turn taking (``VOXFLOW_STT``, ``VOXFLOW_MIN_BARGE_IN``, ...), voxflow-adapters
the transports' (``VOXFLOW_PORT``, ``VOXFLOW_TURN_CREDENTIAL``, ...). A
package registers each variable a section reads as an entry point of
:data:`SETTINGS_GROUP`, named like the setting and naming the section::

    [project.entry-points."voxflow.settings"]
    stt = "voxflow_voice.settings:VoiceSection"

so the core knows every variable's name without importing a package (the warning about
an unknown variable), loads a section only to list its settings (``--help``) or to read a
variable that is set, and never names the package. :meth:`Settings.section` gives a
section's values (``settings.section(VoiceSection).stt``); options route to the section
that owns them (:meth:`Settings.with_options`). Secrets (``SecretStr``) show in no repr,
dump or error, and settings holding one refuse to be pickled (a pickle would carry it in
clear): read them again in the other process.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)

from .endpoints import normalize_endpoints
from .errors import VoxflowError
from .pg_url import check_database_url, redact_url
from .plugins import Declared, declared

__all__ = [
    "DATABASE_URL_VARIABLE",
    "ENV_PREFIX",
    "RETIRED_GROUP",
    "SETTINGS_GROUP",
    "TOOL_VARIABLES",
    "Settings",
    "SettingsError",
    "SettingsSection",
]

ENV_PREFIX = "VOXFLOW_"

SETTINGS_GROUP = "voxflow.settings"
"""The entry-point group a package registers its section's variables in (one entry per
setting, named like it: ``stt = "voxflow_voice.settings:VoiceSection"``)."""

RETIRED_GROUP = "voxflow.retired_settings"
"""The entry-point group of the settings a section replaced (its ``RETIRED``), so that
one set is refused with its replacement, not ignored."""

TOOL_VARIABLES = frozenset({
    "VOXFLOW_CALLER_TOKEN",  # the scripted WebRTC caller's page token
    "VOXFLOW_BENCH_FIGURES",  # where `voxflow bench` has its scripts write their figures
    "VOXFLOW_TEST_DATABASE_URL",  # the test suite's PostgreSQL
    "VOXFLOW_BENCH_DATABASE_URL",  # the benchmarks' PostgreSQL
    "VOXFLOW_REQUIRE_POSTGRES",  # CI: a PostgreSQL test that finds no server fails
})
"""``VOXFLOW_*`` variables read by voxflow's tools and tests, not by :class:`Settings`."""


class SettingsError(VoxflowError, ValueError):
    """A ``VOXFLOW_*`` variable holds a value its setting cannot take."""


_S = TypeVar("_S", bound="SettingsSection")


class SettingsSection(BaseModel):
    """Settings read from ``VOXFLOW_*`` variables and command-line options: the base of
    :class:`Settings` and of the sections installed packages add (see the module).

    A subclass declares fields (each with a ``description``: the ``--help`` line) and may
    set ``FIXES`` (how to correct a field, in its error), ``FLAGS`` (a field's option when
    it is not ``--field-name``), ``CROSS_FIELDS`` (the fields a model-level rule names:
    the first one given is the variable its error starts with) and ``RETIRED`` (a setting
    it replaced: the new one, and the form an old value takes in it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)

    FIXES: ClassVar[Mapping[str, str]] = {}
    FLAGS: ClassVar[Mapping[str, str]] = {}
    CROSS_FIELDS: ClassVar[tuple[str, ...]] = ()
    RETIRED: ClassVar[Mapping[str, tuple[str, str]]] = {}

    @classmethod
    def from_env(cls: type[_S], environ: Mapping[str, str] | None = None) -> _S:
        """The section from ``VOXFLOW_*`` variables (``os.environ`` if ``environ`` is
        None); a variable set empty counts as unset.

        Raises:
            SettingsError: a variable's value is invalid, or a retired one is set; the
                message names the variable.
        """
        env = os.environ if environ is None else environ
        for old, (new, form) in cls.RETIRED.items():
            raw = env.get(ENV_PREFIX + old.upper())
            if raw is not None and raw.strip() != "":
                raise SettingsError(
                    f"{ENV_PREFIX}{old.upper()} is replaced by {ENV_PREFIX}{new.upper()}: "
                    f"set {ENV_PREFIX}{new.upper()}={form.format(raw.strip())!r} and "
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
                (name for name in cls.CROSS_FIELDS if name in values),
                cls.CROSS_FIELDS[0] if cls.CROSS_FIELDS else "?")
            fix = cls._fix(field) if first["loc"] else None
            raise SettingsError(
                f"{ENV_PREFIX}{field.upper()}={cls._shown(field, values.get(field))!r}: "
                f"{first['msg'].removeprefix('Value error, ')}" + (f"; {fix}" if fix else "")
            ) from None

    def with_options(self: _S, **options: Any) -> _S:
        """This section with command-line values (None: not given) over it.

        Raises:
            SettingsError: a value is invalid; the message names the option
                (``--log-level``). A retired setting is named with its replacement.
        """
        given = {k: v for k, v in options.items() if v is not None}
        cls = type(self)
        for old, (new, form) in cls.RETIRED.items():
            if old in given:
                flag = cls.FLAGS.get(new, "--" + new.replace("_", "-"))
                raise SettingsError(
                    f"{old} is replaced by {ENV_PREFIX}{new.upper()} ({flag}): give "
                    f"{new}={form.format(str(given[old]).strip())!r}")
        try:
            return cls.model_validate({**self.model_dump(), **given})
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "?"
            flag = cls.FLAGS.get(field, "--" + field.replace("_", "-"))
            fix = cls._fix(field)
            raise SettingsError(
                f"{flag} {cls._shown(field, given.get(field))!r}: "
                f"{first['msg'].removeprefix('Value error, ')}"
                + (f"; {fix}" if fix else "")
            ) from None

    def __getstate__(self) -> dict[Any, Any]:
        """Refused when these settings hold a secret (a pickle would carry it in clear).

        Raises:
            TypeError: a secret is set; the message says what to do instead.
        """
        if self._holds_secret():
            raise TypeError(f"{type(self).__name__} holds a secret, so it is not pickled: "
                            "read the settings in the other process (from_env)")
        return super().__getstate__()

    def _holds_secret(self) -> bool:
        return any(isinstance(getattr(self, name), SecretStr) for name in type(self).model_fields)

    @classmethod
    def _fix(cls, field: str) -> str | None:
        """How to correct ``field``: its entry in ``FIXES``, else its range read from its
        bounds ("give seconds, at least 0 and at most 3"), so a bound and its message
        agree."""
        if field in cls.FIXES:
            return cls.FIXES[field]
        info = cls.model_fields.get(field)
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

    @classmethod
    def _shown(cls, field: str, value: Any) -> Any:
        """A rejected value as an error message may show it: a secret's never."""
        info = cls.model_fields.get(field)
        if info is not None and "SecretStr" in str(info.annotation) and value is not None:
            return "<hidden>"
        return value

    @classmethod
    def own_rows(cls) -> list[tuple[str, str, str]]:
        """(variable, meaning, default) for each setting of this section."""
        rows = []
        for name, info in cls.model_fields.items():
            default = info.default
            shown = "none" if default in (None, ()) else str(default)
            rows.append((ENV_PREFIX + name.upper(), info.description or "", shown))
        return rows


def _registered(group: str = SETTINGS_GROUP) -> dict[str, EntryPoint]:
    """The entry points of ``group`` by setting name (an editable install's read from
    its ``pyproject.toml``: its metadata may be stale, :mod:`voxflow.plugins`).

    Raises:
        SettingsError: two packages register one setting for different sections (an
            option would go to either), naming both.
    """
    found: dict[str, Declared] = {}
    for one in sorted(declared(group), key=lambda e: e.entry.value):
        entry, first = one.entry, found.setdefault(one.entry.name, one)
        if first.entry.value != entry.value:
            raise SettingsError(
                f"{ENV_PREFIX}{entry.name.upper()} is registered by two packages, "
                f"{first.package} ({first.entry.value}) and {one.package} ({entry.value}): "
                "uninstall one of them")
    return {name: one.entry for name, one in found.items()}


def _load(entry: EntryPoint) -> type[SettingsSection]:
    """The section an entry point names.

    Raises:
        SettingsError: it cannot be loaded, or is not a :class:`SettingsSection`.
    """
    try:
        loaded = entry.load()
    except Exception as exc:  # a broken package: said, not a traceback
        raise SettingsError(f"the settings of {entry.value} cannot be loaded "
                            f"({type(exc).__name__}: {exc})") from None
    if not (isinstance(loaded, type) and issubclass(loaded, SettingsSection)):
        raise SettingsError(f"{entry.value} is not a voxflow SettingsSection")
    return loaded


def _sections() -> list[type[SettingsSection]]:
    """Every installed section, loaded, in the order of its package's entry points."""
    classes = [_load(entry) for entry in _registered().values()]
    return list(dict.fromkeys(classes))


class Settings(SettingsSection):
    """Everything a voxflow command can be configured with: the core's settings, and the
    installed packages' sections (:meth:`section`)."""

    FIXES: ClassVar[Mapping[str, str]] = {
        "demo_out": "give the folder the demo writes its call to, e.g. voxflow-demo",
        "model": "give a litellm model id such as gpt-4o-mini, or leave it out (rule-based)",
        "log_level": "use DEBUG, INFO, WARNING or ERROR",
        "log_format": "use text or json",
        "llm_timeout": "give seconds, more than 0 and at most 600",
        "llm_retries": "give a whole number from 0 to 10",
        "llm_endpoints": "give http(s)://host[:port][/path] URLs separated by commas, without "
        "credentials, query or fragment",
        "metrics_port": "give a TCP port from 1 to 65535 (0: any free port), or leave it "
        "unset (no metrics port)",
        "metrics_token": "give a random token of at least 16 characters, e.g. the output of "
        "`python3 -c 'import secrets; print(secrets.token_urlsafe())'`",
        "database_url": (
            "give postgresql://user[:password]@host[:port]/database, or unset it for the "
            "embedded SQLite store"
        ),
    }
    FLAGS: ClassVar[Mapping[str, str]] = {"demo_out": "--out"}

    home: Path | None = Field(None, description="data folder: persistence, model cache")
    model: str | None = Field(
        None, min_length=1, description="litellm model id for open questions (`--model`)"
    )
    demo_out: Path = Field(Path("voxflow-demo"), description="where `voxflow demo` writes")
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


    _sections: dict[type[SettingsSection], SettingsSection] = PrivateAttr(default_factory=dict)
    # the variables no installed section registers (a section asked for by a stale
    # install's caller reads them): hidden, as any may be a secret
    _environ: dict[str, SecretStr] = PrivateAttr(default_factory=dict)

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

    def _holds_secret(self) -> bool:
        return bool(self._environ) or super()._holds_secret() or any(
            section._holds_secret() for section in self._sections.values())

    @classmethod
    def _shown(cls, field: str, value: Any) -> Any:
        if field == "database_url" and isinstance(value, str):
            return redact_url(value)  # the URL, without its password
        if field == "llm_endpoints" and isinstance(value, str):
            return re.sub(r"//[^/,]*@", "//***@", value)
        return super()._shown(field, value)

    def section(self, section: type[_S]) -> _S:
        """The values of an installed package's section: from the variables these
        settings were read from, with the options given over them.

        Raises:
            TypeError: ``section`` is not a :class:`SettingsSection` class.
            SettingsError: a variable of a section not registered as an entry point (a
                stale install) is invalid.
        """
        if not (isinstance(section, type) and issubclass(section, SettingsSection)) or (
                issubclass(section, Settings)):
            raise TypeError(f"section must be a SettingsSection class, got {section!r}")
        found = self._sections.get(section)
        if isinstance(found, section):
            return found
        return section.from_env({name: value.get_secret_value()
                                 for name, value in self._environ.items()})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``VOXFLOW_*`` variables (``os.environ`` if ``environ`` is None),
        every installed section whose variables are set read and checked with them.

        Raises:
            SettingsError: a variable's value is invalid (the message names the
                variable), or two packages register the same setting.
        """
        env = os.environ if environ is None else environ
        settings = super().from_env(env)
        given = {name: value.strip() for name, value in env.items()  # (not the core's own)
                 if name.startswith(ENV_PREFIX) and value.strip() != ""
                 and name[len(ENV_PREFIX):].lower() not in cls.model_fields}
        registered = {**_registered(RETIRED_GROUP), **_registered()}
        settings._environ.update({name: SecretStr(value) for name, value in given.items()
                                  if name[len(ENV_PREFIX):].lower() not in registered})
        for entry in dict.fromkeys(registered[name[len(ENV_PREFIX):].lower()]
                                   for name in given
                                   if name[len(ENV_PREFIX):].lower() in registered):
            section = _load(entry)
            if section not in settings._sections:
                settings._sections[section] = section.from_env(given)
        return settings

    def with_options(self, **options: Any) -> Settings:
        """These settings with command-line values (None: not given) over them; a
        section's options (``stt=``) go to the installed section that owns them.

        Raises:
            SettingsError: a value is invalid; the message names the option
                (``--log-level``).
        """
        own = {k: v for k, v in options.items() if k in type(self).model_fields}
        registered = {**_registered(RETIRED_GROUP), **_registered()}
        theirs: dict[type[SettingsSection], dict[str, Any]] = {}
        for name, value in options.items():
            if name not in own and value is not None:
                if name not in registered:
                    own[name] = value  # (refused by the model: no such setting)
                    continue
                theirs.setdefault(_load(registered[name]), {})[name] = value  # (retired: said)
        changed = super().with_options(**own)
        changed._environ.update(self._environ)
        changed._sections.update(self._sections)
        for section, values in theirs.items():
            changed._sections[section] = self.section(section).with_options(**values)
        return changed

    @staticmethod
    def describe() -> list[tuple[str, str, str]]:
        """(variable, meaning, default) for every setting, the core's then each installed
        section's, for ``--help`` and the README.

        Raises:
            SettingsError: an installed section cannot be loaded.
        """
        rows = Settings.own_rows()
        for section in _sections():
            rows.extend(section.own_rows())
        return rows

    @staticmethod
    def variables() -> dict[str, str]:
        """``VOXFLOW_*`` variable → setting name, for docs and ``doctor``: the core's and
        every installed section's (read from the entry points, nothing imported).

        Raises:
            SettingsError: two packages register the same setting.
        """
        names = [*Settings.model_fields, *_registered()]
        return {ENV_PREFIX + name.upper(): name for name in dict.fromkeys(names)}

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


DATABASE_URL_VARIABLE = "VOXFLOW_DATABASE_URL"
"""The environment variable that selects PostgreSQL persistence."""
