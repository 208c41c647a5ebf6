"""The ``voxflow`` command line.

Subcommands: ``demo`` (a complete call, offline), ``chat`` (text chat with a flow;
``--voice``: through the microphone and speakers), ``jobs worker`` (background jobs in a
job-worker process), ``doctor`` (what is installed and how to fix what is missing) and
``bench`` (runs the benchmarks), plus the commands installed packages supply through
:mod:`voxflow.commands` (``serve``: browser calls over WebRTC, from voxflow-adapters),
which also supply the voice modes of ``chat`` and ``demo``. Exit codes: 0 success, 1 the
command failed, 2 bad usage or bad input, 130 interrupted (Ctrl-C).

The commands that run an assistant (``demo``, ``chat``, ``jobs worker`` and every
supplied command) share one option set (:mod:`.options`: ``FLOW``,
``--model``, ``--log-level``, ``--log-format``, and the ``VOXFLOW_*`` variables listed in
their ``--help``), and every option and path is checked before anything runs: a bad
value is one line naming it and the fix, never a traceback, and never after a call has
played.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..commands import (
    MODES,
    Command,
    CommandMode,
    InstalledCommands,
    MissingCommandError,
    UsageError,
    add_metrics_arguments,
    check_seconds,
    installed_commands,
)
from ..errors import VoxflowError
from ..settings import Settings
from .options import Parser, assistant_options, check_assistant, command_settings

if TYPE_CHECKING:
    from ..monitoring import Monitor

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_CORE_COMMANDS = ("demo", "chat", "jobs", "doctor", "bench")


# -- commands -----------------------------------------------------------------------------


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor_table, run_checks  # here: a command loads only what it runs

    checks = run_checks()
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        from rich.console import Console  # here: only a table on the terminal needs rich

        Console().print(doctor_table(checks))
    return EXIT_FAILED if any(c.status == "missing" for c in checks) else EXIT_OK


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _cmd_chat(
    args: argparse.Namespace, *, voice: CommandMode | None,
    voice_options: Sequence[argparse.Action], missing: MissingCommandError | None,
) -> int:
    if not args.voice and any(getattr(args, a.dest) != a.default for a in voice_options):
        names = sorted(a.option_strings[0] for a in voice_options)
        raise UsageError(f"{_and(names)} need --voice")
    settings = command_settings(args)
    model = check_assistant(args, settings, voice=args.voice)
    if args.voice:
        if voice is None:
            raise missing or MissingCommandError("chat", "no installed package provides it")
        return voice.run(args, settings, model)
    from .repl import run_repl  # here: a command loads only what it runs

    return run_repl(args.flow, model)


def _writable_folder(path: Path, option: str) -> None:
    """Create ``path`` if needed and check a file can be written in it."""
    probe = path / ".voxflow-write-check"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"{option} {path}: cannot write there ({reason}); "
                         f"choose a folder you can write to with {option}") from None


def _cmd_demo(
    args: argparse.Namespace, *, voice: CommandMode | None, missing: MissingCommandError | None,
) -> int:
    from ..demo import run_text_demo  # here: a command loads only what it runs

    settings = command_settings(args)
    model = check_assistant(args, settings)
    problem = missing or MissingCommandError("demo", "no installed package provides it")
    if voice is None and args.script is not None:
        raise UsageError(f"--script needs the voice call demo: {problem}")
    out = settings.demo_out
    _writable_folder(out, "--out" if args.out is not None else "VOXFLOW_DEMO_OUT")
    if voice is not None:
        try:
            return voice.run(args, settings, model)
        except MissingCommandError as exc:
            if args.script is not None:
                raise UsageError(f"--script needs the voice call demo: {exc}") from None
            problem = exc
    print(f"the voice call demo is not installed ({problem}); the same conversation "
          "as text:", file=sys.stderr)
    return run_text_demo(model=model, json_output=args.json)


class _CommandLine:
    """The shared options of one command's arguments, checked (see
    :class:`voxflow.commands.CommandLine`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args

    def settings(self, *, log_level: str | None = None) -> Settings:
        return command_settings(self._args, log_level=log_level)

    def check_assistant(self, settings: Settings, *, voice: bool = True) -> str | None:
        return check_assistant(self._args, settings, voice=voice)


def _cmd_supplied(args: argparse.Namespace, *, command: Command) -> int:
    return command.run(args, _CommandLine(args))


def _cmd_not_installed(args: argparse.Namespace, *, problem: MissingCommandError) -> int:
    raise problem


MAX_JOB_CONCURRENCY = 64
"""The most jobs one job worker runs at once: its pool holds a connection per running job
(plus 3), and PostgreSQL's default ``max_connections`` is 100; run more job workers."""


def _cmd_jobs_worker(args: argparse.Namespace) -> int:
    """Run the background jobs that call workers queued, until SIGTERM/SIGINT."""
    import asyncio  # here: a command loads only what it runs

    settings = command_settings(args, log_level="INFO")
    # Procrastinate's INFO lines print each job's arguments (what a flow gave the job, a
    # caller's details among them): voxflow.jobs says each job's start and end with its
    # session and job ids instead
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    # psycopg's pool warns at each connection it cannot make: through an outage, a line a
    # second; voxflow.jobs says the outage once when it begins and once when it ends
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    if settings.database_url is None:
        raise UsageError("voxflow jobs worker needs the job queue's database: export "
                         "VOXFLOW_DATABASE_URL=postgresql://user@host:5432/database "
                         "(the one the call workers use)")
    # (a heartbeat is an UPDATE: ten a second at most; a stalled job is re-run within a day)
    heartbeat = check_seconds(2.0 if args.heartbeat is None else args.heartbeat,
                              "--heartbeat", 0.1, 3600.0)
    stalled = check_seconds(5 * heartbeat if args.stalled_after is None else args.stalled_after,
                            "--stalled-after", 1.0, 86400.0)
    if stalled <= heartbeat:
        raise UsageError(f"--stalled-after {stalled:g} must be longer than --heartbeat "
                         f"{heartbeat:g} (a few heartbeats, e.g. {5 * heartbeat:g})")
    patience = None if args.report_patience is None else check_seconds(
        args.report_patience, "--report-patience", 1.0, 86400.0)
    if not 1 <= args.concurrency <= MAX_JOB_CONCURRENCY:
        raise UsageError(f"--concurrency {args.concurrency}: give a whole number from 1 to "
                         f"{MAX_JOB_CONCURRENCY} (a running job may hold a database "
                         "connection; run more job workers for more)")
    check_assistant(args, settings)  # imports FLOW: its module declares the job functions
    if args.flow is None:
        import voxflow.examples.assistant  # noqa: F401  # the example assistant's jobs
    from ..jobs.execution import REPORT_PATIENCE  # here: a command loads only what it runs
    from ..jobs.queue import PostgresJobQueue  # here: a command loads only what it runs

    if patience is None:
        patience = REPORT_PATIENCE

    # the schema is the URL's (its search_path's first): the one the call workers use
    queue = PostgresJobQueue(settings.database_url.get_secret_value())
    monitor = _monitor(settings, "jobs-worker")

    async def run() -> None:
        if monitor is None:
            await queue.run_worker(concurrency=args.concurrency, heartbeat=heartbeat,
                                   stalled_after=stalled, install_signal_handlers=True,
                                   report_patience=patience)
            return
        from ..jobs.metrics import watch_queue  # here: prometheus_client, only when asked

        watch_queue(monitor.registry, queue.statistics)

        def running(yes: bool) -> None:
            if yes:
                monitor.set_ready()
            elif queue.database_away and not queue.worker_stopping:
                monitor.set_unready("the job queue's database is unreachable: no job is "
                                    "taken until it answers (the worker waits for it)")
            else:
                monitor.set_unready("stopping: the running jobs finish, no new one starts")

        async with monitor:
            print(f"metrics at {monitor.url}/metrics (/health, /ready)", flush=True)
            await queue.run_worker(concurrency=args.concurrency, heartbeat=heartbeat,
                                   stalled_after=stalled, install_signal_handlers=True,
                                   running=running, report_patience=patience)

    asyncio.run(run())
    return EXIT_OK


def _monitor(settings: Settings, role: str) -> Monitor | None:
    """The process's :class:`~voxflow.monitoring.Monitor` (``--metrics-port``), or None.

    Raises:
        UsageError: it cannot be served (prometheus_client missing, a public bind without
            its token), saying the fix.
    """
    if settings.metrics_port is None:
        return None
    from ..monitoring import Monitor, MonitoringError  # here: only with --metrics-port

    token = settings.metrics_token
    try:
        return Monitor(role, host=settings.metrics_host, port=settings.metrics_port,
                       token=None if token is None else token.get_secret_value())
    except MonitoringError as exc:
        raise UsageError(str(exc)) from None


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import (  # here: a command loads only what it runs
        NOT_IN_A_CHECKOUT,
        benchmark_scripts,
        default_benchmark_dir,
        run_bench,
    )

    root = Path(args.dir) if args.dir is not None else default_benchmark_dir()
    if root is None:  # installed from wheels: nothing the user typed was wrong
        print(f"error: {NOT_IN_A_CHECKOUT}", file=sys.stderr)
        return EXIT_FAILED
    scripts = benchmark_scripts(root)
    if not scripts:
        raise UsageError(f"no benchmark scripts in {root}: run from a voxflow checkout, "
                         "or point --dir at its benchmarks/ folder")
    names = [p.stem for p in scripts]
    if args.list:
        print("\n".join(names))
        return EXIT_OK
    if args.only:
        unknown = [n for n in args.only if n not in names]
        if unknown:
            raise UsageError(f"no benchmark named {', '.join(unknown)} in {root}; "
                             f"available: {', '.join(names)}")
        scripts = [p for p in scripts if p.stem in args.only]
    result = run_bench(scripts, progress=sys.stderr, quiet=args.json)
    if args.json:
        print(json.dumps({"runs": result.runs, "figures": result.figures}, indent=2))
    else:
        _print_bench(result.runs, result.figures)
    if result.missed:
        print(f"{len(result.missed)} figure(s) miss their target: "
              + "; ".join(f"{f['benchmark']} {f['name']} = {f['value']} {f['unit']} "
                          f"(target {f['target']})" for f in result.missed), file=sys.stderr)
    return EXIT_FAILED if result.failed else EXIT_OK


def _print_bench(runs: list[dict[str, Any]], figures: list[dict[str, Any]]) -> None:
    # here: only the bench command's table needs rich
    from rich.console import Console
    from rich.table import Table

    table = Table(title="voxflow benchmarks (medians; each script prints more)")
    for column in ("benchmark", "figure", "value", "unit", "target", "met"):
        table.add_column(column, justify="right" if column == "value" else "left")
    marks = {True: "[green]yes[/]", False: "[bold red]MISSED[/]", None: ""}
    for f in figures:
        value = f["value"]
        shown = f"{value:.4g}" if isinstance(value, int | float) else str(value)
        table.add_row(str(f["benchmark"]), str(f["name"]), shown, str(f["unit"]),
                      str(f["target"]), marks[f.get("meets_target")])
    for r in runs:
        if r["exit"] != 0:
            table.add_row(str(r["benchmark"]), "[red]failed[/]", str(r["exit"]), "exit", "", "")
    Console().print(table)


# -- the parser ----------------------------------------------------------------------------


def _version() -> str:
    try:
        return version("voxflow")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _parser(installed: InstalledCommands) -> argparse.ArgumentParser:
    parser = Parser(
        prog="voxflow", description="voxflow: conversational flows with a real-time voice.",
        epilog="exit codes: 0 success, 1 the command failed, 2 bad usage or input, "
               "130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"voxflow {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run a complete scripted call, offline",
                          description="A scripted caller talks to the example assistant "
                                      "through the real voice pipeline.")
    _demo_options(demo)
    demo_voice, demo_missing = _fitting(installed, "demo", _demo_options)
    if demo_voice is not None:
        demo_voice.add_arguments(demo)
    demo.set_defaults(func=functools.partial(_cmd_demo, voice=demo_voice, missing=demo_missing))

    chat = sub.add_parser("chat", help="chat with a flow: typed, or by voice (--voice)",
                          description="Text chat with a conversational flow; with --voice, "
                                      "through the microphone and speakers.")
    _chat_options(chat)
    chat_voice, chat_missing = _fitting(installed, "chat", _chat_options)
    voice_options = chat_voice.add_arguments(chat) if chat_voice is not None else ()
    chat.set_defaults(func=functools.partial(
        _cmd_chat, voice=chat_voice, voice_options=tuple(voice_options), missing=chat_missing))

    missing = dict(installed.missing)
    for name, command in installed.commands.items():
        unfit = _options_problem(command.add_arguments, assistant_options)
        if unfit is not None:
            missing[name] = MissingCommandError(name, unfit, install=_reinstall(command))
            continue
        supplied = sub.add_parser(name, help=command.help, description=command.description)
        runs_flow = getattr(command, "runs_flow", True)  # (False: no FLOW, no --model)
        assistant_options(supplied, flow=runs_flow, model=runs_flow)
        command.add_arguments(supplied)
        supplied.set_defaults(func=functools.partial(_cmd_supplied, command=command))
    for name, problem in missing.items():
        if name not in MODES:  # typed, it says what to install; not listed in --help
            absent = sub.add_parser(name, add_help=False, prefix_chars="\0")
            absent.add_argument("ignored", nargs=argparse.REMAINDER)
            absent.set_defaults(func=functools.partial(_cmd_not_installed, problem=problem))

    jobs = sub.add_parser("jobs", help="background jobs in job-worker processes (PostgreSQL)",
                          description="Background jobs on the PostgreSQL job queue.")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="COMMAND")
    worker = jobs_sub.add_parser(
        "worker", help="run the jobs that call workers queued (VOXFLOW_DATABASE_URL)",
        description="Run the background jobs of FLOW that call workers queued in "
                    "VOXFLOW_DATABASE_URL, until SIGTERM or Ctrl-C (running jobs finish "
                    "first). A job whose worker stops heartbeating is run again, as its "
                    "next attempt, by another worker. The queue is in the first schema of "
                    "the URL's search_path (public when it names none), where every "
                    "process given that URL keeps its tables.")
    assistant_options(worker)
    worker.add_argument("--concurrency", type=int, default=8,
                        help=f"jobs run at once, 1 to {MAX_JOB_CONCURRENCY} (default: 8)")
    worker.add_argument("--heartbeat", type=float, default=None, metavar="SECONDS",
                        help="seconds between two heartbeats, 0.1 to 3600 (default: 2)")
    worker.add_argument("--stalled-after", type=float, default=None, metavar="SECONDS",
                        help="seconds without a heartbeat before a worker's jobs run again, "
                             "1 to 86400 and more than --heartbeat (default: 5 heartbeats)")
    worker.add_argument("--report-patience", type=float, default=None, metavar="SECONDS",
                        help="seconds a job's report waits for an unreachable database: a "
                             "job that finishes meanwhile reports its result once the "
                             "database returns (the worker itself waits for it however "
                             "long), 1 to 86400 (default: 900)")
    add_metrics_arguments(worker)
    worker.set_defaults(func=_cmd_jobs_worker)

    doctor = sub.add_parser("doctor", help="what is installed, and how to fix what is missing")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(func=_cmd_doctor)

    bench = sub.add_parser("bench", help="run the benchmarks under benchmarks/")
    bench.add_argument("--dir", default=None,
                       help="folder of benchmark scripts (default: ./benchmarks, else the "
                            "checkout's)")
    bench.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    bench.add_argument("--only", nargs="+", default=None, metavar="NAME",
                       help="run only these scripts (names from --list)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    bench.set_defaults(func=_cmd_bench)
    return parser


def _demo_options(demo: argparse.ArgumentParser) -> None:
    assistant_options(demo, flow=False)
    demo.add_argument("--fast", action="store_true",
                      help="virtual audio time: seconds, not real time (latencies are "
                           "simulated, not measured)")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    demo.add_argument("--out", default=None, metavar="DIR",
                      help="output folder (default: $VOXFLOW_DEMO_OUT, else voxflow-demo)")
    demo.add_argument("--script", default=None, metavar="WAVDIR",
                      help="a folder of WAV files (one per line, in name order) to speak "
                           "instead of the bundled voice")


def _chat_options(chat: argparse.ArgumentParser) -> None:
    assistant_options(chat)
    chat.add_argument("--voice", action="store_true",
                      help="talk through the microphone and speakers instead of typing "
                           "(keys: m mute, q quit, r reconnect)")


def _options_problem(
    add: Callable[[argparse.ArgumentParser], object],
    base: Callable[[argparse.ArgumentParser], None],
) -> str | None:
    """Why an installed package's ``add_arguments`` cannot join the parser it is meant
    for (tried on a throwaway one with the same options: an option named twice, a
    package built for another voxflow), or ``None``."""
    probe = argparse.ArgumentParser(add_help=True)
    base(probe)
    try:
        add(probe)
    except Exception as exc:  # a package's bug must not break every command
        return f"its options cannot be added ({type(exc).__name__}: {exc})"
    return None


def _reinstall(command: object) -> str:
    package = type(command).__module__.split(".")[0]
    return f"pip install --force-reinstall {package.replace('_', '-')}"


def _fitting(
    installed: InstalledCommands, name: str, base: Callable[[argparse.ArgumentParser], None]
) -> tuple[CommandMode | None, MissingCommandError | None]:
    """The voice mode of core command ``name`` if its options fit, else why not."""
    mode = installed.modes.get(name)
    if mode is None:
        return None, installed.missing.get(name)
    problem = _options_problem(mode.add_arguments, base)
    if problem is None:
        return mode, None
    return None, MissingCommandError(name, problem, install=_reinstall(mode))


def _silence_stdout() -> None:
    """After a closed pipe (``voxflow doctor --json | head``): no error at exit either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = _parser(installed_commands(core=_CORE_COMMANDS)).parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not as noise at exit
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MissingCommandError as exc:
        command = "voxflow chat --voice" if exc.name == "chat" else f"voxflow {exc.name}"
        print(f"error: {command} is not installed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except VoxflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    return code

