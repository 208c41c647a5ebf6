"""The ``voxflow`` command line.

Subcommands: ``demo`` (a complete call, offline), ``chat`` (text chat with a flow;
``--voice``: through the microphone and speakers),
``serve`` (browser calls over WebRTC),
``doctor`` (what is installed and how to fix what is missing) and ``bench`` (runs the
benchmarks). Exit codes: 0 success, 1 the command failed, 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from .errors import VoxflowError

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_checks

    checks = run_checks()
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="voxflow doctor")
        for column in ("check", "status", "detail", "fix"):
            table.add_column(column)
        colours = {"ok": "green", "missing": "red", "warning": "yellow"}
        for c in checks:
            table.add_row(c.name, f"[{colours[c.status]}]{c.status}[/]", c.detail, c.fix)
        Console().print(table)
    return EXIT_FAILED if any(c.status == "missing" for c in checks) else EXIT_OK


def _cmd_chat(args: argparse.Namespace) -> int:
    if args.voice:
        return _cmd_voice_chat(args)
    if args.headphones or args.input_device is not None or args.output_device is not None:
        print("error: --headphones, --input-device and --output-device need --voice",
              file=sys.stderr)
        return EXIT_USAGE
    if args.flow is None:
        print("error: chat needs a FLOW (path.py:Class or module:Class) without --voice",
              file=sys.stderr)
        return EXIT_USAGE
    from ._loader import load_flow_class

    flow_cls = load_flow_class(args.flow)
    flow = flow_cls()
    if not getattr(flow, "conversational", False):
        print(f"error: {args.flow} is not a conversational flow", file=sys.stderr)
        return EXIT_USAGE
    import asyncio

    from .wiring import chat_text

    asyncio.run(chat_text(flow))  # jobs, announcements and history as in a voice call
    return EXIT_OK


def _adapter(module: str, command: str, what: str, extra: str) -> ModuleType | None:
    """Import an adapter module, or say which extra to install (None)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        print(f"error: {command} needs the {what} ({exc}); "
              f"install it with: pip install 'voxflow[{extra}]'", file=sys.stderr)
        return None


def _cmd_voice_chat(args: argparse.Namespace) -> int:
    chat = _adapter("voxflow_adapters.local_chat", "voxflow chat --voice",
                    "local audio adapter", "local")
    if chat is None:
        return EXIT_FAILED
    try:
        devices = [chat.parse_device(d) for d in (args.input_device, args.output_device)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    code: int = chat.run_voice_chat(
        flow=args.flow, input_device=devices[0], output_device=devices[1],
        headphones=args.headphones, model=args.settings.model, settings=args.settings,
    )
    return code


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.script is not None and not Path(args.script).is_dir():
        print(f"error: --script must be a folder of WAV files, got {args.script}",
              file=sys.stderr)
        return EXIT_USAGE
    settings = args.settings
    return run_demo(
        fast=args.fast,
        model=args.model if args.model is not None else settings.model,
        json_output=args.json,
        out=args.out if args.out is not None else str(settings.demo_out),
        script=args.script,
        settings=settings,
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    command = _adapter("voxflow_adapters.webrtc.command", "voxflow serve", "WebRTC adapter",
                       "webrtc")
    if command is None:
        return EXIT_FAILED
    settings = args.settings
    code: int = command.run_serve(
        flow=args.flow,
        host=args.host if args.host is not None else settings.host,
        port=args.port if args.port is not None else settings.port,
        token=args.token,
        model=args.model if args.model is not None else settings.model,
        ice_servers=args.ice_server, ice_host_addresses=args.ice_host, max_calls=args.max_calls,
        settings=settings,
    )
    return code


def _cmd_bench(args: argparse.Namespace) -> int:
    import os
    import tempfile
    import time

    root = Path(args.dir)
    scripts = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        scripts = [p for p in scripts if p.stem in args.only]
    if not scripts:
        print(f"error: no benchmark scripts in {root}", file=sys.stderr)
        return EXIT_USAGE
    figures: list[dict[str, object]] = []
    runs: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sink = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "VOXFLOW_BENCH_FIGURES": str(sink)}
        for script in scripts:
            print(f"== {script.name}", file=sys.stderr, flush=True)
            began = time.perf_counter()
            result = subprocess.run(
                [sys.executable, str(script)], env=env, check=False,
                stdout=sys.stderr if args.json else None,
            )
            runs.append({"benchmark": script.stem, "exit": result.returncode,
                         "seconds": round(time.perf_counter() - began, 1)})
        if sink.exists():
            figures = [json.loads(line) for line in sink.read_text().splitlines() if line]
    if args.json:
        print(json.dumps({"runs": runs, "figures": figures}, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="voxflow benchmarks (medians; each script prints more)")
        for column in ("benchmark", "figure", "value", "unit", "target"):
            table.add_column(column, justify="right" if column == "value" else "left")
        for f in figures:
            value = f["value"]
            shown = f"{value:.4g}" if isinstance(value, int | float) else str(value)
            table.add_row(str(f["benchmark"]), str(f["name"]), shown, str(f["unit"]),
                          str(f["target"]))
        for r in runs:
            if r["exit"] != 0:
                table.add_row(str(r["benchmark"]), "[red]failed[/]", str(r["exit"]), "exit", "")
        Console().print(table)
    return EXIT_FAILED if any(r["exit"] != 0 for r in runs) else EXIT_OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("voxflow")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxflow", description="voxflow: conversational flows with a real-time voice."
    )
    parser.add_argument("--version", action="version", version=f"voxflow {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run a complete scripted call, offline")
    demo.add_argument(
        "--fast", action="store_true", help="deterministic clock: seconds, not real time"
    )
    demo.add_argument(
        "--model", default=None, help="a litellm model id (default: rule-based, no key)"
    )
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    demo.add_argument("--out", default=None, help="output folder (default: voxflow-demo)")
    demo.add_argument(
        "--script", default=None, help="a folder of WAV files to speak instead of the voice"
    )
    demo.set_defaults(func=_cmd_demo)

    chat = sub.add_parser("chat", help="text chat with a flow (path.py:Class or module:Class)")
    chat.add_argument("flow", nargs="?", default=None,
                      help="the flow class, e.g. examples/support.py:SupportFlow "
                           "(with --voice: the example assistant if omitted)")
    chat.add_argument("--voice", action="store_true",
                      help="talk through the microphone and speakers instead of typing")
    chat.add_argument("--input-device", default=None, metavar="DEVICE",
                      help="microphone index or name (see voxflow doctor)")
    chat.add_argument("--output-device", default=None, metavar="DEVICE",
                      help="speaker index or name (see voxflow doctor)")
    chat.add_argument("--headphones", action="store_true",
                      help="no echo gate: the assistant cannot hear itself")
    chat.set_defaults(func=_cmd_chat)

    doctor = sub.add_parser("doctor", help="what is installed, and how to fix what is missing")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(func=_cmd_doctor)

    serve = sub.add_parser("serve", help="talk to a flow from a browser (WebRTC)")
    serve.add_argument("flow", nargs="?", default=None,
                       help="path.py:Class or module:Class (default: the example assistant)")
    serve.add_argument("--host", default=None, help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="TCP port (default: 8080)")
    serve.add_argument("--token", default=None, help="the /offer token (default: random)")
    serve.add_argument("--model", default=None, help="a litellm model id for open questions")
    serve.add_argument("--ice-server", action="append", default=[], metavar="URL",
                       help="a stun:/turn: server (repeatable; default: none)")
    serve.add_argument("--ice-host", action="append", default=None, metavar="IP",
                       help="local IP offered as ICE host candidate (repeatable; default: "
                       "every non-loopback interface)")
    serve.add_argument("--max-calls", type=int, default=8, help="concurrent calls (default: 8)")
    serve.set_defaults(func=_cmd_serve)

    bench = sub.add_parser("bench", help="run the benchmarks under benchmarks/")
    bench.add_argument("--dir", default="benchmarks", help="folder of benchmark scripts")
    bench.add_argument("--only", nargs="*", default=None, metavar="NAME",
                       help="run only these scripts (by name without .py)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = _parser().parse_args(argv)
    from .settings import Settings, SettingsError

    try:
        args.settings = Settings.from_env()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=args.settings.log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.func(args)
    except VoxflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
