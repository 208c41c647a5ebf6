"""``voxflow_adapters.testkit.flows.serve_process``: a server subprocess started, waited for until
it says it listens, and stopped; its deadline holds even for a process that prints nothing.
``serve_processes``: several started at once."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.testkit.flows import (
    ServeCommand,
    ServeStartError,
    serve_process,
    serve_processes,
)

pytestmark = pytest.mark.unit


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_process_that_says_nothing_fails_at_the_deadline_not_when_it_exits() -> None:
    """A server silent past ``within`` (hung, or loading too long) is reported at the
    deadline: the wait does not block on its silent stdout (here until it says it
    listens, 20 s late, and is taken as ready)."""
    silent = python("import time; time.sleep(20); print('listening', flush=True); "
                    "time.sleep(600)")
    with pytest.raises(ServeStartError, match=r"did not say 'listening' within 1 s"), \
            serve_process(silent, within=1, name="silent"):
        pass


def test_a_ready_process_is_yielded_with_its_stdout_and_stopped_on_exit() -> None:
    server = python("import sys, time\nprint('loading', flush=True)\n"
                    "print('listening on :1', flush=True)\nprint('after', flush=True)\n"
                    "time.sleep(600)")
    with serve_process(server, within=120) as proc:
        assert proc.poll() is None
        assert proc.stdout is not None and proc.stdout.readline() == "after\n"
    assert proc.returncode is not None  # stopped (SIGKILL by default)


def test_a_process_that_exits_first_is_reported_with_its_log(tmp_path: Path) -> None:
    dying = python("import sys; sys.stderr.write('no such flow: x.py'); sys.exit(3)")
    log = tmp_path / "server.log"
    with pytest.raises(ServeStartError, match=r"dying exited 3 .*no such flow: x\.py"), \
            serve_process(dying, log=log, within=120, name="dying"):
        pass


def test_processes_start_at_once_and_are_yielded_in_order(tmp_path: Path) -> None:
    """Each says it is ready only once the other has started (a file each writes first):
    started one after the other, the first would never be ready."""
    first, second = tmp_path / "first", tmp_path / "second"

    def waits_for(mine: Path, other: Path) -> list[str]:
        return python(f"import pathlib, time\npathlib.Path({str(mine)!r}).touch()\n"
                      f"while not pathlib.Path({str(other)!r}).exists(): time.sleep(0.05)\n"
                      "print('ready', flush=True)\ntime.sleep(600)")

    with serve_processes(ServeCommand(waits_for(first, second), ready="ready", within=60),
                         ServeCommand(waits_for(second, first), ready="ready",
                                      within=60)) as procs:
        assert [p.poll() for p in procs] == [None, None]
        assert len({p.pid for p in procs}) == 2
    assert all(p.returncode is not None for p in procs)  # both stopped


def test_one_process_that_fails_to_start_stops_the_others(tmp_path: Path) -> None:
    """The healthy server, already listening when the other one dies, is stopped: its
    pid (which it wrote down) names no process after the failure."""
    pid_file = tmp_path / "server.pid"
    server = python(f"import os, pathlib, time\n"
                    f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
                    "print('listening', flush=True)\ntime.sleep(600)")
    dying = python("import sys; sys.stderr.write('bad flag'); sys.exit(2)")
    started: list[Any] = []
    with pytest.raises(ServeStartError, match=r"dying exited 2 .*bad flag"), \
            serve_processes(ServeCommand(server, within=120),
                            ServeCommand(dying, log=tmp_path / "d.log", within=120,
                                         name="dying")) as procs:
        started.extend(procs)  # (not reached)
    assert started == []
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left running
        os.kill(pid, 0)
