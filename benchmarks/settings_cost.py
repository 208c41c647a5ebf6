"""What reading the settings costs a call: ``Settings.from_env``, ``with_options`` and
``unknown_variables``, each of which looks the installed packages' settings up.

Run: ``uv run python benchmarks/settings_cost.py``

They read the packages' entry points from :mod:`voxflow.plugins`, which scans the
installed distributions once per ``sys.path`` and times of its folders for the
settings, the commands, the doctor and the engines alike. Before (each call scanned every
distribution, and the commands and engines scanned again on their own), Dec 4, the
same run alternating the main checkout's interpreter and this one, load 5.1-5.4, best of
5 x 20 calls: ``from_env`` 19-33 ms -> 0.09 ms, ``with_options`` 17-35 ms -> 0.12 ms,
``unknown_variables`` 9-12 ms -> 0.02 ms (3.5-6.2 ms each before on a calm machine).
Keying the cache on the folders' times too (a package installed while the process runs is
seen, review finding 3; one ``stat`` per path entry), Dec 4, main's checkout then this
one in one run, load 1.2: ``from_env`` 0.092 -> 0.144 ms, ``with_options`` 0.118 ->
0.171 ms, ``unknown_variables`` 0.023 -> 0.044 ms.
"""

from __future__ import annotations

import os
import timeit

from _figures import figure

from voxflow.settings import Settings

ENV = {"VOXFLOW_STT": "whisper:base", "VOXFLOW_PORT": "9000"}


def main() -> None:
    settings = Settings.from_env(ENV)
    cases = {
        "Settings.from_env": lambda: Settings.from_env(ENV),
        "Settings.with_options": lambda: settings.with_options(stt="whisper:base", port=9001),
        "Settings.unknown_variables": lambda: Settings.unknown_variables(ENV),
    }
    for name, call in cases.items():
        call()  # (the first reads the packages)
        ms = min(timeit.repeat(call, number=20, repeat=5)) / 20 * 1000
        print(f"{name:<28} {ms:7.3f} ms per call (best of 5 x 20)")
        figure(f"{name} per call", ms, "ms")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
