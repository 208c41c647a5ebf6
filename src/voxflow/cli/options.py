"""The option set every ``voxflow`` command that runs an assistant shares, defined once:
``FLOW``, ``--model``, ``--log-level``, ``--log-format`` (:func:`assistant_options`),
the ``VOXFLOW_*`` variables listed in their ``--help`` (:class:`Parser`, which also names
an unknown option under the usage of the command it was given to), the settings they
make, applied to logging, tracing and the LLM policy (:func:`command_settings`), and the
check of ``FLOW`` and its model (:func:`check_assistant`). A bad value is a
:class:`~voxflow.commands.UsageError` naming it and the fix.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..commands import UsageError
from ..errors import VoxflowError
from ..settings import Settings, SettingsError

__all__ = [
    "EXAMPLE_ASSISTANT",
    "Parser",
    "assistant_options",
    "check_assistant",
    "command_settings",
]

EXAMPLE_ASSISTANT = "the example assistant (voxflow.examples.assistant:Assistant)"


class Parser(argparse.ArgumentParser):
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


def assistant_options(parser: argparse.ArgumentParser, *, flow: bool = True,
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
    if isinstance(parser, Parser):
        parser.lists_variables = True


def command_settings(args: argparse.Namespace, *, log_level: str | None = None) -> Settings:
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


def check_assistant(
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
