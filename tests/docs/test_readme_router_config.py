"""The README's ``RouterConfig`` table lists every field, with its real default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voxflow import RouterConfig

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_router_table_names_every_field_and_its_default() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n### The LLM router\n"):]
    section = section[: section.index("\n### ", 1)]
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", section, flags=re.MULTILINE))
    assert set(rows) == set(RouterConfig.model_fields)
    defaults = RouterConfig().model_dump()
    for name, shown in rows.items():
        real = defaults[name]
        assert shown == (f'"{real}"' if isinstance(real, str) else repr(real)), name
