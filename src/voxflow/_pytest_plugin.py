"""voxflow's pytest plugin for every project that installs it (entry point ``pytest11``).

litellm silences, when it is imported, the pydantic warnings its own TypedDicts
raise ("... using the `ReadOnly` qualifier"), some on each call. pytest restores the
warning filters after collection and after each test, so a test module that imported
litellm (a :class:`voxflow.testing.ScriptedLLM` made at module level) lost that filter,
and every later call listed a dozen of them in the summary. The plugin gives pytest
the same filter, for the whole session. It imports nothing: a test run that never uses
voxflow pays nothing for it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LITELLM_WARNINGS", "pytest_configure"]

LITELLM_WARNINGS = ("ignore:.*`ReadOnly` qualifier:UserWarning",)
"""``filterwarnings`` lines: litellm's own filters, restated for pytest."""


def pytest_configure(config: Any) -> None:
    for line in LITELLM_WARNINGS:
        config.addinivalue_line("filterwarnings", line)
