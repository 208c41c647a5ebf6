"""The scale-out commands as a user installs them: ``voxflow serve --front-door``,
``serve --worker`` and ``voxflow jobs worker`` run from the built wheels (their help, the
fix they name without a database), and a job worker from the wheels starts on the test
PostgreSQL, registers in the schema its URL names (a fresh one, dropped after), and stops
on SIGTERM (skipped with the reason where none answers)."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PG_URL, schema_url, skip_without_postgres

from .conftest import clean_env, voxflow

pytestmark = pytest.mark.packaging


def no_database() -> dict[str, str]:
    env = clean_env()
    env.pop("VOXFLOW_DATABASE_URL", None)
    return env


@pytest.mark.parametrize(("command", "options"), [
    (("serve", "--front-door", "--help"), ("--front-door", "--offer-timeout")),
    (("serve", "--worker", "--help"), ("--worker", "--drain-seconds", "--stale-after")),
    (("jobs", "worker", "--help"), ("--concurrency", "--stalled-after", "search_path")),
])
def test_the_scale_out_commands_run_from_the_wheels(
    installed_voxflow: Path, empty_dir: Path, command: tuple[str, ...], options: tuple[str, ...]
) -> None:
    shown = voxflow(installed_voxflow, *command, cwd=empty_dir, env=no_database())
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert all(option in shown.stdout for option in options), shown.stdout
    # run for real without VOXFLOW_DATABASE_URL: the fix, not a traceback
    ran = voxflow(installed_voxflow, *command[:-1], cwd=empty_dir, env=no_database())
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert "VOXFLOW_DATABASE_URL=postgresql://" in ran.stderr


def test_a_job_worker_from_the_wheels_starts_and_stops_on_postgresql(
    installed_voxflow: Path, empty_dir: Path
) -> None:
    skip_without_postgres()
    import psycopg

    schema = f"vxpkg_{uuid.uuid4().hex[:10]}"

    def workers() -> int:
        with psycopg.connect(PG_URL) as conn:
            if conn.execute("SELECT to_regclass(%s)",
                            (f"{schema}.procrastinate_workers",)).fetchone() == (None,):
                return 0
            row = conn.execute(f'SELECT count(*) FROM "{schema}".procrastinate_workers'
                               ).fetchone()
            return int(row[0]) if row else 0

    worker = subprocess.Popen(
        [str(installed_voxflow / "voxflow"), "jobs", "worker", "--heartbeat", "0.5"],
        cwd=empty_dir, env=clean_env({"VOXFLOW_DATABASE_URL": schema_url(schema)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while workers() == 0:  # registered: its heartbeat row is in the schema
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, "the job worker never registered"
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0 and "Traceback" not in err, err
        assert workers() == 0  # it unregistered on the way out
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
