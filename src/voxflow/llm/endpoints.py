"""Where a declared LLM may send its requests: the endpoint allow-list.

A flow declaration (``Flow.from_declaration``) is data from outside the code. litellm
sends the provider's key from the environment (``OPENAI_API_KEY``...) to whatever
endpoint a call names, so a declaration that could name one could send that key to any
host. A declared LLM (``conversational.llm``, a router's, an agent's, ``call: llm``'s,
``human_feedback``'s) may therefore set:

* ``model``: a model id (``openai/gpt-4o-mini``), never an address: litellm sends a
  ``huggingface/https://…`` or ``oobabooga/https://…`` model's request, and the key,
  to that URL;
* what shapes the answer: :data:`DECLARABLE_LLM_PARAMETERS` (``temperature``,
  ``max_tokens``, ``timeout``, ``mock_response``...);
* ``api_base`` / ``base_url`` only when the endpoint is allowed: by the code that loads
  the declaration (``Flow.from_declaration(..., llm_endpoints=[...])``) or by the
  operator (``VOXFLOW_LLM_ENDPOINTS``, which the CLI passes to
  :func:`set_llm_endpoints`).

Everything else (``api_key``, ``headers``, ``extra_headers``, ``custom_llm_provider``,
``api_version``, cloud credentials, ``proxy``, callbacks...) is refused: it can carry
credentials or send the request elsewhere. Code sets those on ``LLM(...)`` itself.

Endpoints are parsed and matched by :mod:`voxflow.endpoints` (an ``http``/``https``
URL without credentials or query; allowed at or under an allowed path); what litellm
gets is the checked, normalized URL, not the declared text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from voxflow.endpoints import endpoint_allowed, normalize_endpoint, normalize_endpoints

__all__ = [
    "DECLARABLE_LLM_PARAMETERS",
    "ENDPOINTS_VARIABLE",
    "ENDPOINT_PARAMETERS",
    "check_declared_llm",
    "check_model_id",
    "llm_endpoints",
    "set_llm_endpoints",
]

ENDPOINTS_VARIABLE = "VOXFLOW_LLM_ENDPOINTS"
"""The variable listing the endpoints declarations may name (comma-separated URLs)."""

ENDPOINT_PARAMETERS = frozenset({"api_base", "base_url"})
"""The litellm parameters that name where a request goes."""

DECLARABLE_LLM_PARAMETERS = frozenset({
    "model", "temperature", "max_tokens", "max_completion_tokens", "timeout", "retries",
    "retry_backoff", "top_p", "stop", "seed", "presence_penalty", "frequency_penalty",
    "reasoning_effort", "mock_response",
})
"""What a declared LLM mapping may set besides an allowed endpoint (and ``params``,
which may hold the same)."""

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,199}")
_FIX = ("allow it in code (Flow.from_declaration(..., llm_endpoints=[...])) or with "
        f"{ENDPOINTS_VARIABLE}")


_endpoints: tuple[str, ...] = ()


def llm_endpoints() -> tuple[str, ...]:
    """The endpoints every declaration may name (see :func:`set_llm_endpoints`)."""
    return _endpoints


def set_llm_endpoints(endpoints: Iterable[str]) -> tuple[str, ...]:
    """Let every declaration loaded from now on name these endpoints (normalized); the
    CLI passes ``VOXFLOW_LLM_ENDPOINTS``. Returns the previous ones.

    Raises:
        TypeError: ``endpoints`` is one string, not a list of them.
        ValueError: an entry is not a valid endpoint (its position named); nothing
            changes.
    """
    global _endpoints
    if isinstance(endpoints, str):
        raise TypeError("endpoints must be a list of URLs, not one string")
    normalized = normalize_endpoints(endpoints, lambda i: f"LLM endpoint {i + 1}")
    previous, _endpoints = _endpoints, tuple(dict.fromkeys(normalized))
    return previous


def check_model_id(model: object) -> str | None:
    """Why ``model`` cannot be a declared model id (None: it can)."""
    if (not isinstance(model, str) or not _MODEL_ID.fullmatch(model) or "://" in model
            or "//" in model):
        return ("must be a model id such as openai/gpt-4o-mini (letters, digits and "
                "._:@+/-), not an address: litellm sends a model id that is a URL its "
                "request, and the provider's key")
    return None


def check_declared_llm(
    spec: str | Mapping[str, Any], path: str, allowed: Iterable[str]
) -> tuple[str | dict[str, Any], list[tuple[str, str]]]:
    """A declared LLM (a model id or a mapping) checked against the rules above.

    Args:
        spec: the declaration's value.
        path: its dotted path in the declaration (errors are named under it).
        allowed: the endpoints it may name (normalized or not).

    Returns:
        ``(spec, errors)``: the spec with each allowed endpoint normalized, and one
        ``(path, message)`` per refused field (none: it may be built).
    """
    if isinstance(spec, str):
        problem = check_model_id(spec)
        return spec, [] if problem is None else [(path, problem)]
    allowed = tuple(allowed)
    errors: list[tuple[str, str]] = []
    checked: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "params" and isinstance(value, Mapping):
            params: dict[str, Any] = {}
            for name, inner in value.items():
                params[name] = _checked(name, inner, f"{path}.params.{name}", allowed, errors)
            checked[key] = params
        else:
            checked[key] = _checked(key, value, f"{path}.{key}", allowed, errors)
    return checked, errors


def _checked(key: object, value: Any, path: str, allowed: tuple[str, ...],
             errors: list[tuple[str, str]]) -> Any:
    if key == "model":
        problem = check_model_id(value)
        if problem is not None:
            errors.append((path, problem))
        return value
    if key in ENDPOINT_PARAMETERS:
        try:
            url = normalize_endpoint(value)
        except ValueError as exc:
            errors.append((path, f"the endpoint {exc}"))
            return value
        if not endpoint_allowed(url, allowed):
            errors.append((path, f"{url!r} is not an allowed LLM endpoint: a declaration "
                                 "may not send the provider's credentials to a host of its "
                                 f"choosing; {_FIX}"))
        return url
    if key not in DECLARABLE_LLM_PARAMETERS:
        errors.append((path, "a declaration may not set this LLM parameter: it can carry "
                             "credentials or send the request elsewhere; it may set "
                             f"{', '.join(sorted(DECLARABLE_LLM_PARAMETERS))} and an allowed "
                             "api_base (set the others on LLM(...) in code)"))
    return value
