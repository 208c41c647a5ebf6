"""The commands of the README's "Deploying" section: every ``voxflow`` line of its shell
blocks parses with the real command line (each option exists and takes its value), and
each subcommand's ``--help`` runs. (The block of the second shape runs as written in
``test_readme_deploying_run.py``; dispatch and failover across these processes in
``adapters/tests/test_call_dispatch_processes.py``.)"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from voxflow.cli.app import _CORE_COMMANDS, _parser, main
from voxflow.commands import installed_commands

README = Path(__file__).resolve().parents[2] / "README.md"


def deploying_commands() -> list[list[str]]:
    """The ``voxflow`` command lines of the section's ```bash blocks (argv after the
    program name; shell variables replaced by a placeholder)."""
    text = README.read_text()
    section = text[text.index("\n## Deploying\n"):]
    section = section[: section.index("\n## ", 1)]
    commands: list[list[str]] = []
    in_bash = False
    for line in section.splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash" and not in_bash
            continue
        if in_bash and line.startswith("voxflow "):
            argv = shlex.split(line.split(" #", 1)[0])[1:]
            commands.append([a.replace("$VOXFLOW_PAGE_TOKEN", "a-shared-page-token")
                             for a in argv])
    return commands


def test_the_section_shows_every_shape() -> None:
    commands = deploying_commands()
    roles = {tuple(a for a in argv if a in ("--front-door", "--worker")) for argv in commands}
    assert {(), ("--front-door",), ("--worker",)} <= roles
    assert ["jobs", "worker"] in commands


@pytest.mark.parametrize("argv", deploying_commands(), ids=" ".join)
def test_each_command_parses_with_the_real_command_line(argv: list[str]) -> None:
    args = _parser(installed_commands(core=_CORE_COMMANDS)).parse_args(argv)
    assert args.command == argv[0]
    if "--max-calls" in argv:
        assert args.max_calls == int(argv[argv.index("--max-calls") + 1])


@pytest.mark.parametrize("command", [["serve"], ["jobs", "worker"]], ids=" ".join)
def test_help_runs(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: voxflow" in out
    if command == ["serve"]:
        assert "--front-door" in out and "--worker" in out and "--drain-seconds" in out
