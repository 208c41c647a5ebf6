"""``docs/architecture.md`` is checked like code: what it names exists, its layers are the
contracts' layers, its links lead somewhere, and the README links it."""

from __future__ import annotations

import configparser
import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("voxflow", "voxflow_voice", "voxflow_adapters")


def _modules() -> list[ModuleType]:
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if ".static" in info.name or info.name.endswith("__main__"):
                continue
            found.append(importlib.import_module(info.name))
    return found


def _resolve(dotted: str) -> object:
    """The module, or the attribute of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


def _code_spans(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.findall(r"`([^`\n]+)`", prose)


def test_every_dotted_name_it_mentions_exists() -> None:
    dotted = [span for span in _code_spans(DOC.read_text())
              if re.fullmatch(r"voxflow(_voice|_adapters)?(\.\w+)+", span)]
    assert len(dotted) > 30  # the check reads the document's names
    missing = []
    for name in dotted:
        try:
            _resolve(name)
        except (ModuleNotFoundError, AttributeError):
            missing.append(name)
    assert missing == []


def test_every_class_and_method_it_mentions_exists() -> None:
    spans = [span for span in _code_spans(DOC.read_text())
             if re.fullmatch(r"[A-Z][A-Za-z]+(\.[a-z_]+)?", span)]
    assert len(spans) > 10
    namespaces = [vars(module) for module in _modules()]
    missing = []
    for span in spans:
        name, _, member = span.partition(".")
        owners = [namespace[name] for namespace in namespaces if name in namespace]
        if not owners or (member and not any(hasattr(o, member) for o in owners)):
            missing.append(span)
    assert missing == []


def test_its_links_and_paths_lead_somewhere() -> None:
    text = DOC.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    paths = [span for span in _code_spans(text)  # repository paths; a link's label is its link
             if re.fullmatch(r"(src|voice|adapters|tests|docs|benchmarks)/[\w./]*", span)]
    assert links and paths
    assert [link for link in links if not (DOC.parent / link).exists()] == []
    assert [path for path in paths if not (ROOT / path).exists()] == []


def _layers(contract: str) -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    lines = config[f"importlinter:contract:{contract}"]["layers"].split("\n")
    return [line.strip() for line in lines if line.strip()]


@pytest.mark.parametrize(("package", "contract"),
                         [("voxflow_voice", "voice"), ("voxflow_adapters", "adapters")])
def test_its_layers_are_the_contracts_layers(package: str, contract: str) -> None:
    row = next(line for line in DOC.read_text().splitlines()
               if line.startswith("| ") and f"| `{package}` |" in line)
    layers_cell = row.split(f"| `{package}` |", 1)[1].rstrip(" |")
    said = re.sub(r"\([^)]*\)", "", layers_cell).split("→")
    written = [" | ".join(re.findall(r"`(\w+)`", layer)) for layer in said]
    assert written == [" | ".join(part.strip() for part in layer.split("|"))
                       for layer in _layers(contract)]


def test_the_readme_links_it() -> None:
    assert "](docs/architecture.md)" in (ROOT / "README.md").read_text()
