"""The ``voxflow`` command line.

Subcommands: ``demo`` (a complete call, offline), ``chat`` (text chat with a flow;
``--voice``: through the microphone and speakers), ``jobs worker`` (background jobs in a
job-worker process), ``doctor`` (what is installed and how to fix what is missing) and
``bench`` (runs the benchmarks), plus the commands installed packages supply through
:mod:`voxflow.commands` (``serve``: browser calls over WebRTC, from voxflow-adapters),
which also supply the voice modes of ``chat`` and ``demo``. Exit codes: 0 success, 1 the
command failed, 2 bad usage or bad input, 130 interrupted (Ctrl-C).

The commands that run an assistant (``demo``, ``chat``, ``jobs worker`` and every
supplied command) share one option set (:func:`_assistant_options`: ``FLOW``,
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
from ..settings import Settings, SettingsError

if TYPE_CHECKING:
    from ..monitoring import Monitor

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

EXAMPLE_ASSISTANT = "the example assistant (voxflow.examples.assistant:Assistant)"
_CORE_COMMANDS = ("demo", "chat", "jobs", "doctor", "bench")


# -- the option set shared by every command that runs an assistant -----------------------


def _variables_epilog() -> str:
    try:
        rows = Settings.describe()
    except SettingsError as exc:  # a broken package's section: said, the rest listed
        rows = [*Settings.own_rows(), ("(installed sections)", str(exc), "-")]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"  {name:<{width}}  {meaning} (default: {default})"
             for name, meaning, default in rows]
    return ("environment (options override these, which override the defaults):\n"
            + "\n".join(lines))


def _assistant_options(parser: argparse.ArgumentParser, *, flow: bool = True,
                       model: bool = True) -> None:
    """``FLOW``, ``--model``, ``--log-level``, ``--log-format``: defined here only
    (``flow``, ``model``: False for a command that runs no flow)."""
    if flow:
        parser.add_argument(
            "flow", nargs="?", default=None, metavar="FLOW",
            help="the flow: path/to/file.py:Class or package.module:Class "
                 f"(default: {EXAMPLE_ASSISTANT})",
        )
    if model:
        parser.add_argument(
            "--model", default=None, metavar="MODEL",
            help="a litellm model id that answers open questions, e.g. gpt-4o-mini; the "
                 "provider's key comes from its usual variable (default: $VOXFLOW_MODEL, "
                 "else rule-based, no key needed)",
        )
    parser.add_argument(
        "--log-level", default=None, type=str.upper, metavar="LEVEL",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="DEBUG, INFO, WARNING or ERROR (default: $VOXFLOW_LOG_LEVEL, else WARNING; "
             "serve: INFO, a line per call)",
    )
    parser.add_argument(
        "--log-format", default=None, type=str.lower, choices=("text", "json"),
        help="log lines as text, or one JSON object per line for production "
             "(default: $VOXFLOW_LOG_FORMAT, else text)",
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if isinstance(parser, _Parser):
        parser.lists_variables = True


def _settings(args: argparse.Namespace, *, log_level: str | None = None) -> Settings:
    """``VOXFLOW_*`` variables with the command's options over them, applied to logging
    and the LLM policy; ``log_level`` is the command's own default (serve: INFO, one line
    per call), used when neither ``--log-level`` nor ``VOXFLOW_LOG_LEVEL`` is given.

    Raises:
        UsageError: a variable or option is invalid.
    """
    # here, as in every command: the CLI loads only what the command runs (fast --help)
    from ..jobs.results import set_max_job_result_chars
    from ..llm.endpoints import set_llm_endpoints
    from ..llm.policy import set_llm_defaults
    from ..logs import configure_logging
    from ..telemetry import configure_tracing

    try:
        settings = Settings.from_env()
        if log_level is not None and not os.environ.get("VOXFLOW_LOG_LEVEL", "").strip():
            settings = settings.with_options(log_level=log_level)
        settings = settings.with_options(
            model=getattr(args, "model", None), log_level=getattr(args, "log_level", None),
            log_format=getattr(args, "log_format", None), demo_out=getattr(args, "out", None),
            host=getattr(args, "host", None), port=getattr(args, "port", None),
            metrics_host=getattr(args, "metrics_host", None),
            metrics_port=getattr(args, "metrics_port", None),
        )
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    configure_logging(settings.log_level, settings.log_format)
    configure_tracing(capture=settings.trace_content or None)  # OTEL_* variables; else off
    for line in Settings.unknown_variables():  # a misspelt variable, silently ignored else
        logging.getLogger("voxflow.settings").warning(line)
    set_llm_defaults(timeout=settings.llm_timeout, retries=settings.llm_retries)
    set_llm_endpoints(settings.llm_endpoints)  # what a flow declaration's LLMs may name
    set_max_job_result_chars(settings.max_job_result_chars)
    return settings


def _check_assistant(
    args: argparse.Namespace, settings: Settings, *, voice: bool = False
) -> str | None:
    """The model the assistant (FLOW, or the example assistant) will use, after checking
    FLOW and the model: ``--model`` / ``VOXFLOW_MODEL`` answer a FLOW that configures no
    LLM of its own (``VOXFLOW_MODEL`` gives way to a FLOW's own LLM).

    Raises:
        UsageError: FLOW cannot be loaded or is not conversational, its state keeps no
            turn records for a ``voice`` call, ``--model`` was given with a FLOW that
            configures its own LLM, or the model's provider key is not set.
    """
    flow = getattr(args, "flow", None)
    model = settings.model
    if flow is not None:
        from ..loader import load_flow_class  # here: a command loads only what it runs

        try:
            flow_cls = load_flow_class(flow)
        except VoxflowError as exc:
            raise UsageError(str(exc)) from None
        if not getattr(flow_cls, "conversational", False):
            raise UsageError(f"{flow} is not a conversational flow: set `conversational = True`"
                             " on the class (see the README's Conversational flows)")
        if voice:
            from ..turns import TurnState  # here: a command loads only what it runs

            state = flow_cls._state_type()
            if state is not None and not issubclass(state, TurnState):
                raise UsageError(
                    f"{flow} keeps its state in {state.__name__}, which has no turn records "
                    "for a call: derive it from voxflow.turns.TurnState (or "
                    "voxflow.wiring.AssistantState for background jobs)")
        if model is not None and flow_cls._conversation_config().llm is not None:
            if args.model is not None:
                raise UsageError(
                    f"{flow} configures its own LLM (ConversationConfig(llm=...)): drop "
                    "--model, or remove the flow's llm=")
            model = None  # VOXFLOW_MODEL is a default: the flow's own LLM wins
    if model is not None:
        from ..llm.policy import missing_credentials  # here: a command loads only what it runs

        missing = missing_credentials(model, {})
        if missing:
            source = "--model" if args.model is not None else "VOXFLOW_MODEL"
            raise UsageError(
                f"{source} {model} needs {' or '.join(missing)}, which is not set: "
                f"export {missing[0]}=... (or leave out {source} for the rule-based assistant)"
            )
    return model


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
    settings = _settings(args)
    model = _check_assistant(args, settings, voice=args.voice)
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

    settings = _settings(args)
    model = _check_assistant(args, settings)
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
        return _settings(self._args, log_level=log_level)

    def check_assistant(self, settings: Settings, *, voice: bool = True) -> str | None:
        return _check_assistant(self._args, settings, voice=voice)


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

    settings = _settings(args, log_level="INFO")
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
    _check_assistant(args, settings)  # imports FLOW: its module declares the job functions
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


class _Parser(argparse.ArgumentParser):
    """argparse, with an unknown option named under the usage of the command it was given
    to: argparse collects what a subcommand does not know and reports it under the
    top-level usage (``voxflow chat --bogus``), or, given before any command, reports the
    missing COMMAND instead (``voxflow --bogus``); a command's ``--help`` lists the
    ``VOXFLOW_*`` variables (``lists_variables``), read only then: the installed packages'
    sections load with it."""

    lists_variables = False

    def format_help(self) -> str:
        if self.lists_variables and self.epilog is None:
            self.epilog = _variables_epilog()
        return super().format_help()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        if self._subparsers is not None:  # `voxflow [options] COMMAND ...`
            for token in given:
                if not token.startswith("-"):
                    break  # the command: what follows is its own
                name = token.split("=", 1)[0]
                if not any(known.startswith(name) for known in self._option_string_actions):
                    self.error(f"unrecognized arguments: {token}")  # (argparse's abbreviations)
        parsed, extras = super().parse_known_args(given, namespace)
        if extras and self._subparsers is None:  # a command's own parser: its usage
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _parser(installed: InstalledCommands) -> argparse.ArgumentParser:
    parser = _Parser(
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
        unfit = _options_problem(command.add_arguments, _assistant_options)
        if unfit is not None:
            missing[name] = MissingCommandError(name, unfit, install=_reinstall(command))
            continue
        supplied = sub.add_parser(name, help=command.help, description=command.description)
        runs_flow = getattr(command, "runs_flow", True)  # (False: no FLOW, no --model)
        _assistant_options(supplied, flow=runs_flow, model=runs_flow)
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
    _assistant_options(worker)
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
    _assistant_options(demo, flow=False)
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
    _assistant_options(chat)
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

