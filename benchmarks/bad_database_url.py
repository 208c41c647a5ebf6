"""How long ``voxflow serve --front-door``/``--worker`` and ``voxflow jobs worker`` take to
say that ``VOXFLOW_DATABASE_URL`` cannot be used, and in how many lines.

Run: ``uv run python benchmarks/bad_database_url.py [--runs 5]``

Each run starts the command as a user would (a fresh process, imports included) with a
URL whose server refuses (a closed port) and one whose database does not exist, and
times it until it exits. Before the early check the front door took ~11.8 s and 9 lines
(the pool's retries for 10 s, then only "pool initialization incomplete"). Medians over
``--runs``; nothing is asserted (the machine is shared: note the load average).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _figures import figure

PG = os.environ.get("VOXFLOW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_run(command: list[str], url: str) -> tuple[float, int, str]:
    env = {**os.environ, "VOXFLOW_DATABASE_URL": url}
    voxflow = str(Path(sys.executable).with_name("voxflow"))
    began = time.perf_counter()
    done = subprocess.run([voxflow, *command], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    seconds = time.perf_counter() - began
    lines = done.stderr.strip().splitlines()
    return seconds, len(lines), (lines[-1] if lines else "")


def main(runs: int) -> None:
    urls = {"refused": f"postgresql://voxflow@127.0.0.1:{closed_port()}/voxflow",
            "no such database": f"{PG.rsplit('/', 1)[0]}/voxflow_no_such_database"}
    commands = {"serve --front-door": ["serve", "--front-door", "--port", str(closed_port())],
                "serve --worker": ["serve", "--worker"],
                "jobs worker": ["jobs", "worker"]}
    print(f"{'command':<20} {'URL':<18} {'median s':>9} {'lines':>6}  last line")
    medians: dict[str, float] = {}
    for name, command in commands.items():
        for kind, url in urls.items():
            results = [one_run(command, url) for _ in range(runs)]
            median = statistics.median(r[0] for r in results)
            medians[f"{name} ({kind})"] = median
            print(f"{name:<20} {kind:<18} {median:>9.2f} {results[0][1]:>6}  "
                  f"{results[0][2][:90]}")
    load = os.getloadavg()[0]
    print(f"(medians of {runs} runs each, process start included; load average {load:.2f})")
    figure("front door, refused database URL: to the error", round(
        medians["serve --front-door (refused)"], 2), "s", target="~1 (was 11.8)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    main(parser.parse_args().runs)
