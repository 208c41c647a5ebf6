"""``voxflow_adapters.testkit.flows.serve_process``: a server subprocess started, waited for until
it says it listens, and stopped; its deadline holds even for a process that prints nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from voxflow_adapters.testkit.flows import ServeStartError, serve_process

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
