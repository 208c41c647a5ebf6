"""How an LLM call may fail: request timeout, retries with backoff, errors that say why.

:class:`voxflow.LLM` applies this policy to every ``litellm.acompletion`` it makes:

* **timeout**: every request gets one (:data:`DEFAULT_TIMEOUT` seconds unless the model's
  ``LLMConfig.timeout`` or :func:`set_llm_defaults` says otherwise), so a provider that
  never answers fails the call instead of hanging the turn;
* **retries**: a *transient* failure (rate limit, timeout, connection error, 5xx) is
  tried again up to ``retries`` times, waiting ``backoff * 2**n`` seconds (with ±25 %
  jitter, at most :data:`MAX_BACKOFF`, or the provider's ``Retry-After`` when it sends
  one and it is shorter than that cap) — but only while nothing has been received: once
  a stream has produced its first token, a failure ends the call (the text already
  spoken cannot be taken back, and a second answer would not match it);
* **errors**: :class:`~voxflow.errors.ProviderError`'s message states the cause — the
  environment variable a provider needs and does not have (checked before any request
  is made), or the provider's own message — with anything that looks like a secret
  (API keys from the environment or the call, ``sk-…`` tokens, bearer tokens) replaced
  by ``***``.

Library code never reads ``VOXFLOW_*`` variables: the CLI passes ``VOXFLOW_LLM_TIMEOUT``
and ``VOXFLOW_LLM_RETRIES`` (see :mod:`voxflow.settings`) to :func:`set_llm_defaults`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

from voxflow.errors import ProviderError
from voxflow.llm._litellm import load_litellm

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "MAX_BACKOFF",
    "LLMDefaults",
    "backoff_delay",
    "credentials_error",
    "is_transient",
    "llm_defaults",
    "log_retry",
    "missing_credentials",
    "provider_error",
    "redact",
    "set_llm_defaults",
]

logger = logging.getLogger("voxflow.llm")

DEFAULT_TIMEOUT = 30.0
"""seconds one LLM request may take (connect and each read), unless configured"""
DEFAULT_RETRIES = 2
"""extra attempts after a transient failure before the first token"""
DEFAULT_BACKOFF = 0.5
"""seconds before the first retry; doubled for each later one"""
MAX_BACKOFF = 8.0
"""the longest wait between two attempts, whatever ``Retry-After`` asks for"""

_TRANSIENT = ("RateLimitError", "Timeout", "APIConnectionError", "ServiceUnavailableError",
              "InternalServerError")
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_SECRET_SHAPES = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/=]{6,}"),
    re.compile(r"(?i)(api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]{6,}"),
)
_CAUSE_LIMIT = 300


@dataclasses.dataclass(frozen=True, slots=True)
class LLMDefaults:
    """The process-wide defaults for models whose ``LLMConfig`` leaves them unset."""

    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF

    def __post_init__(self) -> None:
        for name, low, high in (("timeout", 0.0, 3600.0), ("backoff", 0.0, 60.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number of seconds, not {value!r}")
            if not (low < value <= high if name == "timeout" else low <= value <= high):
                raise ValueError(f"{name} must be in ({low:g}, {high:g}] seconds, got {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise TypeError(f"retries must be an int, not {self.retries!r}")
        if not 0 <= self.retries <= 10:
            raise ValueError(f"retries must be between 0 and 10, got {self.retries}")


_defaults = LLMDefaults()


def llm_defaults() -> LLMDefaults:
    """The current defaults (see :func:`set_llm_defaults`)."""
    return _defaults


def set_llm_defaults(
    *, timeout: float | None = None, retries: int | None = None, backoff: float | None = None
) -> LLMDefaults:
    """Change the timeout, retries and first backoff of models that do not set their own.

    Returns the previous defaults (pass their fields back to restore them).

    Raises:
        ValueError, TypeError: a value is out of range or not a number; nothing changes.
    """
    global _defaults
    previous = _defaults
    _defaults = LLMDefaults(
        timeout=previous.timeout if timeout is None else timeout,
        retries=previous.retries if retries is None else retries,
        backoff=previous.backoff if backoff is None else backoff,
    )
    return previous


def _secrets(extra: Iterable[object]) -> list[str]:
    values = [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6]
    values += [str(v) for v in extra if v is not None and len(str(v)) >= 6]
    return sorted(set(values), key=len, reverse=True)


def redact(text: str, *, secrets: Iterable[object] = ()) -> str:
    """``text`` with secrets replaced by ``***``: the values of environment variables named
    like keys/tokens/secrets/passwords, ``secrets``, and key-shaped strings."""
    for value in _secrets(secrets):
        text = text.replace(value, "***")
    for shape in _SECRET_SHAPES:
        text = shape.sub(lambda m: (m.group(1) if m.re.groups else "") + "***", text)
    return text


def missing_credentials(model: str, kwargs: Mapping[str, Any]) -> list[str]:
    """The environment variables ``model``'s provider needs for a key and does not have.

    Empty when the call brings its own ``api_key`` or ``api_base`` (a local server), is
    mocked, or litellm does not know the provider (the call itself will say so).
    """
    if kwargs.get("mock_response") is not None or kwargs.get("api_key") or kwargs.get("api_base"):
        return []

    try:
        report = load_litellm().validate_environment(model)
    except Exception:  # an unknown provider: the request reports it with litellm's words
        return []
    missing = report.get("missing_keys") or []
    return [k for k in missing if isinstance(k, str) and k.endswith(("_KEY", "_TOKEN"))]


def is_transient(exc: BaseException) -> bool:
    """Whether the same request may succeed if sent again (rate limit, timeout, 5xx...)."""

    litellm = load_litellm()
    kinds = tuple(c for n in _TRANSIENT if isinstance(c := getattr(litellm, n, None), type))
    status = getattr(exc, "status_code", None)
    return isinstance(exc, kinds) or (
        isinstance(status, int) and (status in (408, 409, 429) or status >= 500)
    )


def _cause(exc: BaseException, secrets: Iterable[object]) -> str:
    text = str(exc).strip() or type(exc).__name__
    # litellm prefixes "litellm.RateLimitError: RateLimitError: OpenAIException - ..."
    text = re.sub(r"^(litellm\.\w+:\s*)?(\w+Error:\s*)?", "", text, count=1)
    text = " ".join(redact(text, secrets=secrets).split())
    if len(text) > _CAUSE_LIMIT:
        text = text[: _CAUSE_LIMIT - 1] + "…"
    return text


def provider_error(
    exc: BaseException, model: str, *, attempts: int = 1, secrets: Iterable[object] = ()
) -> ProviderError:
    """A :class:`ProviderError` whose message names the model, the kind of failure and
    its cause (secrets redacted); ``retryable`` when the failure is transient."""
    kind = type(exc).__name__
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    message = f"{model} call failed{tries} ({kind}): {_cause(exc, list(secrets))}"
    return ProviderError(message, provider=model, retryable=is_transient(exc))


def credentials_error(model: str, missing: list[str]) -> ProviderError:
    """The error for a provider whose key variable is not set (no request was made)."""
    names = " or ".join(missing)
    return ProviderError(
        f"{model}: {names} is not set, so the provider cannot be called; "
        f"export {missing[0]}=... (or pass api_key=, or choose another model)",
        provider=model, retryable=False,
    )


def backoff_delay(attempt: int, base: float, exc: BaseException | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): ``base * 2**(attempt-1)``
    with ±25 % jitter, or a shorter ``Retry-After`` from the provider; at most
    :data:`MAX_BACKOFF`."""
    delay: float = base * 2.0 ** (attempt - 1) * random.uniform(0.75, 1.25)
    after = _retry_after(exc)
    if after is not None and after <= MAX_BACKOFF:
        delay = max(after, 0.0)
    return min(delay, MAX_BACKOFF)


def _retry_after(exc: BaseException | None) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
        return float(str(value)) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def log_retry(model: str, attempt: int, attempts: int, delay: float, exc: BaseException,
              secrets: Iterable[object] = ()) -> None:
    """One WARNING line per retry (the cause redacted)."""
    logger.warning("%s attempt %d of %d failed (%s: %s); retrying in %.2f s", model, attempt,
                   attempts, type(exc).__name__, _cause(exc, list(secrets)), delay)
