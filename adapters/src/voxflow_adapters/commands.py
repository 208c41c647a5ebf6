"""The ``voxflow`` CLI commands this package supplies (see :mod:`voxflow.commands`).

``voxflow serve`` (:data:`serve`), and the voice modes of ``voxflow chat --voice``
(:data:`voice_chat`) and ``voxflow demo`` (:data:`voice_demo`): their options and the
checks that need no model, so a bad value is said before anything loads. The CLI
imports this module for every invocation (to list ``serve`` in ``voxflow --help``), so
it imports nothing heavy: each ``run`` imports its implementation (aiortc, sounddevice,
the models), and a missing extra there is said with the extra to install.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from voxflow.commands import (
    CommandLine,
    UsageError,
    add_metrics_arguments,
    check_seconds,
    implementation,
)
from voxflow.engine_spec import ENGINE_KINDS, ENGINE_OPTIONS, NO_ENGINE
from voxflow.errors import EngineError
from voxflow.settings import ENV_PREFIX, Settings, SettingsError

from .settings import HostingSection, PhoneSection

__all__ = [
    "PhoneCommand",
    "ServeCommand",
    "StatusCommand",
    "VoiceChatMode",
    "VoiceDemoMode",
    "add_scale_arguments",
    "chosen_engines",
    "engine_options",
    "phone",
    "scale_seconds",
    "serve",
    "status",
    "voice_chat",
    "voice_demo",
]



def scale_seconds(args: argparse.Namespace) -> tuple[float, float, float]:
    """The scale-out options' seconds (:func:`add_scale_arguments`), checked and with their
    defaults: ``--offer-timeout``, ``--drain-seconds``, ``--stale-after``.

    Raises:
        UsageError: one is out of its range (the message names it).
    """
    offer_timeout = check_seconds(10.0 if args.offer_timeout is None
                                  else args.offer_timeout, "--offer-timeout", 1.0, 86400.0)
    drain_seconds = check_seconds(60.0 if args.drain_seconds is None
                                  else args.drain_seconds, "--drain-seconds", 0.0, 86400.0)
    stale_after = check_seconds(5.0 if args.stale_after is None else args.stale_after,
                                "--stale-after", 1.0, 86400.0)
    return offer_timeout, drain_seconds, stale_after


def add_scale_arguments(parser: argparse.ArgumentParser, *, front_door: str, worker: str,
                        waiting: str, drained: str) -> None:
    """The scale-out options ``serve`` and ``phone`` share (several processes on one
    PostgreSQL): the two roles (``front_door`` and ``worker``: their help), how long
    ``waiting`` (a request) waits for a worker, how long a draining worker's calls go on
    (``drained``: what happens then), when a silent worker gets no call."""
    scale = parser.add_argument_group(
        "scale out (several processes or machines on one PostgreSQL: VOXFLOW_DATABASE_URL)")
    role = scale.add_mutually_exclusive_group()
    role.add_argument("--front-door", action="store_true", help=front_door)
    role.add_argument("--worker", action="store_true", help=worker)
    scale.add_argument("--offer-timeout", type=float, default=None, metavar="SECONDS",
                       help=f"front door: how long {waiting} waits for a worker, 1 to 86400 "
                            "(default: 10)")
    scale.add_argument("--drain-seconds", type=float, default=None, metavar="SECONDS",
                       help=f"worker: on SIGTERM, how long running calls may go on{drained}, "
                            "0 to 86400 (default: 60)")
    scale.add_argument("--stale-after", type=float, default=None, metavar="SECONDS",
                       help="a worker silent this long gets no call, 1 to 86400; workers "
                            "heartbeat 4 times as often (default: 5)")

class ServeCommand:
    """``voxflow serve``: browser calls over WebRTC (:mod:`voxflow_adapters.webrtc`)."""

    help = "talk to a flow from a browser (WebRTC)"
    description = "Browser calls over WebRTC, on loopback by default."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """``--host``, ``--port``, ``--token``, ICE, TLS, ``--max-calls`` and the scale-out
        roles."""
        parser.add_argument("--host", default=None,
                            help="bind address (default: $VOXFLOW_HOST, else 127.0.0.1)")
        parser.add_argument("--port", type=int, default=None,
                            help="TCP port (default: $VOXFLOW_PORT, else 8080)")
        parser.add_argument("--token", default=None, help="the /offer token (default: random)")
        parser.add_argument(
            "--ice-server", action="append", default=[], metavar="URL",
            help="a stun:/turn: server (repeatable; default: none; TURN credentials from "
                 "VOXFLOW_TURN_USERNAME/VOXFLOW_TURN_CREDENTIAL)")
        parser.add_argument(
            "--ice-host", action="append", default=None, metavar="IP",
            help="local IP offered as ICE host candidate (repeatable; default: every "
                 "non-loopback interface)")
        parser.add_argument("--max-calls", type=int, default=None,
                            help="concurrent calls at most (default: $VOXFLOW_MAX_CALLS, "
                                 "else as many as their measured cost allows)")
        parser.add_argument("--tls-cert", default=None, metavar="PEM",
                            help="serve HTTPS with this certificate (chain) ...")
        parser.add_argument("--tls-key", default=None, metavar="PEM",
                            help="... and its private key")
        parser.add_argument("--self-signed", action="store_true",
                            help="serve HTTPS with a generated 7-day certificate (a LAN trial)")
        parser.add_argument("--trust-forwarded", action="store_true",
                            help="behind a reverse proxy: trust its X-Forwarded-Proto/-Host "
                                 "for the Origin check")
        engine_options(parser)
        add_scale_arguments(
            parser, front_door="serve the page and POST /offer only; calls go to call workers",
            worker="a call worker: no HTTP port, answers the calls front doors dispatch "
                   "(--max-calls slots)",
            waiting="an offer", drained="")
        add_metrics_arguments(parser)

    def run(self, args: argparse.Namespace, cli: CommandLine) -> int:
        """Check the options and the address, then serve until interrupted."""
        role = "front-door" if args.front_door else "worker" if args.worker else "all"
        _check_role_options(args, role)
        settings = cli.settings(log_level="INFO")  # a line per call
        if (args.front_door or args.worker) and settings.database_url is None:
            raise UsageError(
                f"--{'front-door' if args.front_door else 'worker'} dispatches calls "
                "through PostgreSQL: set VOXFLOW_DATABASE_URL=postgresql://user@host"
                ":5432/database (the same for every front door and worker), or drop "
                "the option to serve everything from this one process")
        # (a worker heartbeats every stale_after/5: at least a second keeps that >= 0.2 s;
        # an offer is never answered in under a second: ICE gathering alone takes longer)
        offer_timeout, drain_seconds, stale_after = scale_seconds(args)
        # (a front door runs no call: VOXFLOW_MODEL, shared by every process, is not its
        # concern)
        model = None if args.front_door else cli.check_assistant(settings, voice=True)
        if not args.front_door:
            settings = chosen_engines(args, settings, "serve")
        hosting = settings.section(HostingSection)
        if not args.worker:
            _check_listen(hosting.host, hosting.port)
        if settings.database_url is not None and role != "all":
            # the database, before aiortc and the models load: one line, at once
            from .hosting.dispatch_tables import DispatchUnavailableError, check_dispatch_database

            try:
                check_dispatch_database(settings.database_url.get_secret_value())
            except DispatchUnavailableError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
        with implementation("serve"):
            from .webrtc.command import run_serve  # aiortc and the models: only to serve
        return run_serve(
            flow=args.flow, host=hosting.host, port=hosting.port, token=args.token,
            model=model, ice_servers=args.ice_server, ice_host_addresses=args.ice_host,
            max_calls=args.max_calls if args.max_calls is not None else hosting.max_calls,
            settings=settings, tls_cert=args.tls_cert, tls_key=args.tls_key,
            self_signed=args.self_signed, trust_forwarded=args.trust_forwarded,
            role=role, offer_timeout=offer_timeout, drain_seconds=drain_seconds,
            stale_after=stale_after,
        )


# What each option of `serve` is for, by role ("all": one process; the others dispatch),
# and why it does not apply elsewhere.
_ROLE_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "flow": (("all", "worker"), "FLOW: the front door runs no call (give FLOW to the call "
                                "workers: voxflow serve --worker FLOW)"),
    "model": (("all", "worker"), "--model: the front door runs no call (give --model to the "
                                 "call workers)"),
    "max_calls": (("all", "worker"), "--max-calls: the front door holds no call (each call "
                                     "worker has its slots: voxflow serve --worker "
                                     "--max-calls N)"),
    "ice_server": (("all", "worker"), "--ice-server: the media go to the call workers, not "
                                      "through the front door (give it to each worker)"),
    "ice_host": (("all", "worker"), "--ice-host: the media go to the call workers, not "
                                    "through the front door (give it to each worker)"),
    "host": (("all", "front-door"), "--host: a call worker has no HTTP port (callers reach "
                                    "the front door's --host; a worker's media address is "
                                    "--ice-host)"),
    "port": (("all", "front-door"), "--port: a call worker has no HTTP port (callers use the "
                                    "front door's --port)"),
    "token": (("all", "front-door"), "--token: the front door checks the offers' token; a "
                                     "call worker takes no offer from the network"),
    "tls_cert": (("all", "front-door"), "--tls-cert: a call worker serves no HTTP (give "
                                        "the certificate to the front door)"),
    "tls_key": (("all", "front-door"), "--tls-key: a call worker serves no HTTP (give the "
                                       "key to the front door)"),
    "self_signed": (("all", "front-door"), "--self-signed: a call worker serves no HTTP "
                                           "(give it to the front door)"),
    "trust_forwarded": (("all", "front-door"), "--trust-forwarded: a call worker serves no "
                                               "HTTP (give it to the front door)"),
    "offer_timeout": (("front-door",), "--offer-timeout: only a front door waits for offers "
                                       "to be answered"),
    "drain_seconds": (("worker",), "--drain-seconds: only a call worker drains on SIGTERM"),
    "stale_after": (("front-door", "worker"), "--stale-after: only front doors and call "
                                              "workers dispatch"),
    **{kind: (("all", "worker"), f"{option}: the front door runs no call (give it to the "
                                 "call workers)")
       for kind, option in ENGINE_OPTIONS.items()},
}
_ROLE_FLAGS = {"all": "without --front-door or --worker", "front-door": "with --front-door",
               "worker": "with --worker"}


def _check_role_options(args: argparse.Namespace, role: str) -> None:
    """Refuse an option given on the command line that ``role`` would ignore (the
    ``VOXFLOW_*`` variables, shared by every process of a deployment, are not options).

    Raises:
        UsageError: naming the option, why it does not apply and where it goes.
    """
    for name, (roles, why) in _ROLE_OPTIONS.items():
        if role not in roles and getattr(args, name, None) not in (None, False, []):
            raise UsageError(f"{why}; drop it {_ROLE_FLAGS[role]}")


def _check_listen(host: str, port: int) -> None:
    """Bind ``host:port`` once, before the models load, so a bad address or a taken port
    is said at once."""
    import socket  # (only serve binds; the CLI's other commands never pay for it)

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(f"--host {host}: not an address of this machine ({exc}); "
                         "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
                         ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                             "choose another --port, or --host an address of this machine"
                             ) from None


class PhoneCommand:
    """``voxflow phone``: phone calls over a carrier's media stream
    (:mod:`voxflow_adapters.phone`, Twilio Media Streams)."""

    help = "answer phone calls (Twilio Media Streams)"
    description = ("Answer phone calls: the number's webhook (POST /voice, its signature "
                   "checked with VOXFLOW_TWILIO_AUTH_TOKEN) connects each call to a "
                   "bidirectional media stream (/media) the flow talks on.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """``--host``, ``--port``, ``--public-url``, ``--max-calls``, ``--no-signature``
        and the engines."""
        parser.add_argument("--host", default=None,
                            help="bind address (default: $VOXFLOW_HOST, else 127.0.0.1)")
        parser.add_argument("--port", type=int, default=None,
                            help="TCP port (default: $VOXFLOW_PORT, else 8080)")
        parser.add_argument("--public-url", default=None, metavar="URL",
                            help="this server as the carrier reaches it (https://host), "
                                 "which the webhook's signature covers")
        parser.add_argument("--max-calls", type=int, default=None,
                            help="concurrent calls at most (default: $VOXFLOW_MAX_CALLS, "
                                 "else as many as their measured cost allows)")
        parser.add_argument("--no-signature", action="store_true",
                            help="accept unsigned webhooks (a loopback trial only)")
        engine_options(parser)
        add_scale_arguments(
            parser, front_door="answer the webhooks only; calls go to phone call workers (a "
                               "stream that ends unfinished is reconnected to a live one)",
            worker="a phone call worker: serves the media streams of the calls front doors "
                   "dispatch (--max-calls slots; --public-url: its own address as the "
                   "carrier reaches it)",
            waiting="a call", drained=" before they move to another worker")

    def run(self, args: argparse.Namespace, cli: CommandLine) -> int:
        """Check the options, then serve until interrupted."""
        settings = cli.settings(log_level="INFO")
        role = "front-door" if args.front_door else "worker" if args.worker else "all"
        for option, value, needs in (("--offer-timeout", args.offer_timeout, ("front-door",)),
                                     ("--drain-seconds", args.drain_seconds, ("worker",)),
                                     ("--stale-after", args.stale_after,
                                      ("front-door", "worker"))):
            if value is not None and role not in needs:
                raise UsageError(f"{option} is for " + " or ".join(f"--{r}" for r in needs)
                                 + ": give that role, or drop the option")
        if role != "all" and settings.database_url is None:
            raise UsageError(
                f"--{role} dispatches calls through PostgreSQL: set VOXFLOW_DATABASE_URL="
                "postgresql://user@host:5432/database (the same for every front door and "
                "worker), or drop the option to answer every call in this one process")
        offer_timeout, drain_seconds, stale_after = scale_seconds(args)
        if args.public_url is not None:
            from .hosting.public_url import PublicUrlError, check_public_url  # (light)

            try:
                args.public_url = check_public_url(args.public_url)  # (normalised)
            except PublicUrlError as exc:
                raise UsageError(str(exc)) from None
        if args.max_calls is not None and args.max_calls < 1:
            raise UsageError(f"--max-calls {args.max_calls}: give at least 1")
        hosting = settings.section(HostingSection)
        if args.no_signature and hosting.host not in ("127.0.0.1", "::1", "localhost"):
            raise UsageError("--no-signature accepts forged calls: only on a loopback "
                             "--host (127.0.0.1)")

        token = settings.section(PhoneSection).twilio_auth_token
        if not args.no_signature and not args.worker and not (
                token and token.get_secret_value()):
            raise UsageError("set VOXFLOW_TWILIO_AUTH_TOKEN to the carrier account's auth "
                             "token (the webhook's signature is checked with it), or give "
                             "--no-signature for a loopback trial")
        model = None if args.front_door else cli.check_assistant(settings, voice=True)
        if not args.front_door:
            settings = chosen_engines(args, settings, "phone")
        _check_listen(hosting.host, hosting.port)
        with implementation("phone"):
            from .phone.command import run_phone  # aiohttp, twilio and the models
        return run_phone(
            flow=args.flow, host=hosting.host, port=hosting.port,
            public_url=args.public_url, model=model, settings=settings,
            max_calls=args.max_calls if args.max_calls is not None else hosting.max_calls,
            no_signature=args.no_signature, role=role, offer_timeout=offer_timeout,
            drain_seconds=drain_seconds, stale_after=stale_after)


class StatusCommand:
    """``voxflow status``: the deployment of ``VOXFLOW_DATABASE_URL`` as its database
    sees it (:mod:`voxflow_adapters.hosting.fleet`)."""

    help = "the call workers, calls, job workers and jobs of a deployment (PostgreSQL)"
    description = ("List the call workers (slots, calls, heartbeats), the calls in progress, "
                   "the job workers and the jobs of the deployment whose database is "
                   "VOXFLOW_DATABASE_URL. Reads only.")
    runs_flow = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """``--json`` and ``--stale-after``."""
        parser.add_argument("--json", action="store_true", help="print it as JSON")
        parser.add_argument("--stale-after", type=float, default=None, metavar="SECONDS",
                            help="a call worker silent this long is shown stale, 1 to 86400 "
                                 "(default: 5, the workers' own)")

    def run(self, args: argparse.Namespace, cli: CommandLine) -> int:
        """Read the tables once and print them; 1 when the database cannot be read."""
        import sys  # (only the commands that print errors themselves need it)

        settings = cli.settings()
        if settings.database_url is None:
            raise UsageError("voxflow status reads the deployment's database: set "
                             "VOXFLOW_DATABASE_URL=postgresql://user@host:5432/database "
                             "(the one its front doors and workers use)")
        stale_after = check_seconds(5.0 if args.stale_after is None else args.stale_after,
                                    "--stale-after", 1.0, 86400.0)
        from voxflow.errors import VoxflowError  # (light: the core's errors)

        from .hosting.fleet import read_fleet, render_fleet  # psycopg: only to read it

        try:
            fleet = read_fleet(settings.database_url.get_secret_value(),
                               stale_after=stale_after)
        except VoxflowError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(fleet.model_dump_json(indent=2) if args.json else render_fleet(fleet))
        return 0


class VoiceChatMode:
    """``voxflow chat --voice``: the microphone and speakers
    (:mod:`voxflow_adapters.local.chat`)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> Sequence[argparse.Action]:
        """The devices and ``--headphones`` (refused by the CLI without ``--voice``)."""
        return (
            parser.add_argument("--input-device", default=None, metavar="DEVICE",
                                help="microphone index or name (see voxflow doctor)"),
            parser.add_argument("--output-device", default=None, metavar="DEVICE",
                                help="speaker index or name (see voxflow doctor)"),
            parser.add_argument("--headphones", action="store_true",
                                help="no echo gate: the assistant cannot hear itself"),
            *engine_options(parser),
        )

    def run(self, args: argparse.Namespace, settings: Settings, model: str | None) -> int:
        """Talk to FLOW until the user quits."""
        settings = chosen_engines(args, settings, "chat")
        with implementation("chat"):
            # sounddevice and the models: only for a voice chat
            from .local.chat import parse_device, run_voice_chat
        try:
            devices = [parse_device(d) for d in (args.input_device, args.output_device)]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return run_voice_chat(
            flow=args.flow, input_device=devices[0], output_device=devices[1],
            headphones=args.headphones, model=model, settings=settings,
        )


class VoiceDemoMode:
    """``voxflow demo``'s simulated voice call (:mod:`voxflow_adapters.demo`)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> Sequence[argparse.Action]:
        """The engines (``--stt``, ``--tts``, ``--vad``, ``--end-of-turn``); the demo's other
        options are the core's (its text demo takes them too)."""
        return engine_options(parser)

    def run(self, args: argparse.Namespace, settings: Settings, model: str | None) -> int:
        """Check ``--script`` and the engines, run the call, print it and write its
        outputs."""
        settings = chosen_engines(args, settings, "demo")
        with implementation("demo"):
            from .demo import DEMO_LINES, run_voice_demo  # the models: only for the call
        if args.script is not None:
            _script_wavs(Path(args.script), DEMO_LINES)
        return run_voice_demo(fast=args.fast, model=model, json_output=args.json,
                              out=str(settings.demo_out), script=args.script,
                              settings=settings)


def engine_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """``--stt``, ``--tts``, ``--vad`` and ``--end-of-turn``: each an engine's name and
    options (``whisper:base``), over ``VOXFLOW_STT``... (:mod:`voxflow.engine_spec`)."""
    group = parser.add_argument_group(
        "engines (NAME or NAME:OPTIONS; voxflow doctor lists the engines installed)")
    return [
        group.add_argument("--stt", default=None, metavar="ENGINE",
                           help="speech to text, e.g. whisper:base or whisper:/path/to/model "
                                "(default: $VOXFLOW_STT, else whisper:tiny.en)"),
        group.add_argument("--tts", default=None, metavar="ENGINE",
                           help="text to speech, e.g. piper:/path/to/voice.onnx (default: "
                                "$VOXFLOW_TTS, else piper, the bundled voice)"),
        group.add_argument("--vad", default=None, metavar="ENGINE",
                           help="voice activity: silero, or energy[:THRESHOLD_DB] (default: "
                                "$VOXFLOW_VAD, else silero)"),
        group.add_argument("--end-of-turn", default=None, metavar="ENGINE",
                           help="smart-turn: a model judges each pause; none: the silence "
                                "alone (default: $VOXFLOW_END_OF_TURN, else none)"),
    ]


def chosen_engines(args: argparse.Namespace, settings: Settings, command: str) -> Settings:
    """``settings`` with the engine options over them, every engine they name found and
    its options checked, before any model loads.

    Raises:
        UsageError: a malformed spec (naming the option or variable).
        voxflow.errors.EngineError: an engine no installed package registers, an option it
            does not take, or an entry point that cannot be loaded; the message starts
            with the option or variable that chose it (the CLI prints it on one line).
        voxflow.commands.MissingCommandError: voxflow-voice cannot be imported.
    """
    try:
        settings = settings.with_options(**{kind: getattr(args, kind, None)
                                            for kind in ENGINE_KINDS})
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    with implementation(command):
        # voxflow_voice: only a command that runs a call finds its engines
        from voxflow_voice.engines.registry import choose_engine
        from voxflow_voice.settings import VoiceSection
    voice = settings.section(VoiceSection)
    for kind in ENGINE_KINDS:
        spec = voice.engine(kind)
        if kind == "end_of_turn" and spec.name == NO_ENGINE:
            continue
        try:
            choose_engine(kind, spec)
        except EngineError as exc:
            given = getattr(args, kind, None) is not None
            source = (f"{ENGINE_OPTIONS[kind]} {str(spec)!r}" if given
                      else f"{ENV_PREFIX}{kind.upper()}={str(spec)!r}")
            raise type(exc)(f"{source}: {exc.reason}", kind=kind, reason=exc.reason,
                            available=exc.available) from None
    return settings


def _script_wavs(folder: Path, lines: Sequence[str]) -> None:
    """Check ``--script``: a folder with one readable WAV file per line of the demo."""
    import wave  # (only a --script demo reads WAV files here)

    if not folder.is_dir():
        raise UsageError(f"--script {folder}: not a folder; give a folder of WAV files, "
                         "one per line the caller says")
    wavs = sorted(folder.glob("*.wav"))
    if len(wavs) != len(lines):
        said = "; ".join(f"{i}. {line}" for i, line in enumerate(lines, 1))
        raise UsageError(f"--script {folder}: needs {len(lines)} WAV files, found "
                         f"{len(wavs)}; one per line, in name order: {said}")
    for wav in wavs:
        try:
            with wave.open(str(wav), "rb") as reader:
                reader.getnframes()
        except (wave.Error, EOFError, OSError) as exc:
            raise UsageError(f"--script {wav}: not a readable PCM WAV file ({exc}); "
                             "record or convert it as 16-bit PCM WAV") from None


phone = PhoneCommand()
serve = ServeCommand()
status = StatusCommand()
voice_chat = VoiceChatMode()
voice_demo = VoiceDemoMode()
