"""The attempts of one LLM call: credentials first, then retries of transient failures.

Used by :class:`~voxflow.llm.LLM` (a whole answer) and :class:`~voxflow.llm.stream.
LLMStream` (a stream, retried only before its first token), with the rules of
:mod:`voxflow.llm.policy` (what is transient, the backoff, the redaction of secrets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from voxflow.errors import ProviderError
from voxflow.llm import policy as llm_policy

__all__ = ["Attempts", "CredentialsMissing", "cause_of"]


class Attempts:
    """The attempts of one call: credentials checked first, transient failures retried
    with backoff while attempts remain; the caller decides what "before the first token"
    means and calls :meth:`failed` only then."""

    def __init__(self, model: str, retries: int, backoff: float, *,
                 secrets: Sequence[object] = ()) -> None:
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self.secrets = tuple(secrets)
        self.made = 0

    def check_credentials(self, kwargs: Mapping[str, Any]) -> None:
        """Raise (no request made) when the provider's key variable is not set."""
        self.made += 1
        if self.made == 1:
            missing = llm_policy.missing_credentials(self.model, kwargs)
            if missing:
                raise CredentialsMissing(llm_policy.credentials_error(self.model, missing))

    async def failed(self, exc: Exception) -> ProviderError | None:
        """The error to raise, or None after waiting for the next attempt."""
        if isinstance(exc, CredentialsMissing):
            return exc.error
        error = llm_policy.provider_error(exc, self.model, attempts=self.made,
                                          secrets=self.secrets)
        if not error.retryable or self.made > self.retries:
            return error
        delay = llm_policy.backoff_delay(self.made, self.backoff, exc)
        llm_policy.log_retry(self.model, self.made, self.retries + 1, delay, exc, self.secrets)
        await asyncio.sleep(delay)
        return None

    def final(self, exc: Exception) -> ProviderError:
        """The error for a failure that must not be retried (tokens were already out)."""
        if isinstance(exc, CredentialsMissing):
            return exc.error
        return llm_policy.provider_error(exc, self.model, attempts=self.made,
                                         secrets=self.secrets)


def cause_of(exc: Exception) -> Exception | None:
    """The exception to chain: none for a check voxflow made itself."""
    return None if isinstance(exc, CredentialsMissing) else exc


class CredentialsMissing(Exception):
    """The provider's key variable is not set: raised inside an attempt (no request
    made), carrying the :class:`ProviderError` the call gives."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error
