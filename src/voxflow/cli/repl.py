"""``voxflow chat``: the text REPL as a person meets it.

A banner says who answers (the flow, and the LLM or "rule-based") and how to leave. The
chat runs through :func:`voxflow.wiring.chat_text` (jobs and announcements as in a
call): a background job's result is printed when it is ready, even while the user types,
above the prompt, which is redrawn with what was typed so far (in a terminal the line is
edited here, in cbreak mode). ``exit``/``quit`` or Ctrl-D end it with exit code 0, Ctrl-C
with 130 (the chat closed within a few seconds, or cut off then, as ``exit`` is when a
background job will not stop; a second Ctrl-C cuts it at once); either way the shell
prompt starts on a new line and the terminal's modes are restored.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import select
import signal
import sys
import threading
from typing import Any

from ..demo import load_example_module
from ..loader import load_flow
from ..wiring import chat_text

__all__ = ["run_repl"]

EXIT_OK, EXIT_INTERRUPTED = 0, 130
_POLL = 0.1
_CLOSE_GRACE = 3.0  # seconds the chat may take to close after Ctrl-C or exit before it is cut


def _make_flow(flow_ref: str | None, model: str | None) -> Any:
    if flow_ref is None:
        return load_example_module().assistant_class(model)()
    return load_flow(flow_ref, model=model)


class _Lines:
    """Reads a line on the chat's reading thread; gives up (EOFError) once ``stop`` is set,
    so Ctrl-C never leaves a thread blocked on the terminal (``input()`` would keep the
    process alive until Enter).

    In a terminal (inside ``with lines:``) it edits the line itself, the terminal in
    cbreak mode (each key read as typed, Ctrl-C still a signal): printable keys,
    Backspace, Ctrl-U, Enter, Ctrl-D on an empty line; so :meth:`interject` can print a
    message that is ready while the user types (a job's result) above the prompt, and
    redraw the prompt with what was typed so far, as a chat app does."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._screen = threading.Lock()  # the terminal's output and the line being typed
        self._prompt: str | None = None  # while a line is being read
        self._typed = ""
        self._fd: int | None = None  # the terminal in cbreak mode (None: lines as given)
        self._saved: Any = None

    def __enter__(self) -> _Lines:
        if os.name != "nt" and sys.stdin.isatty() and sys.stdout.isatty():
            import termios  # here: POSIX only (no termios on Windows)
            import tty  # here: POSIX only

            fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd, termios.TCSANOW)
            self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            import termios  # here: POSIX only

            termios.tcsetattr(fd, termios.TCSADRAIN, self._saved)

    def __call__(self, prompt: str) -> str:
        with self._screen:
            sys.stdout.write(prompt)
            sys.stdout.flush()
            self._prompt, self._typed = prompt, ""
        try:
            if self._fd is not None:
                return self._edit(self._fd)
            if os.name == "nt":  # no select() on consoles
                return input()
            while not self.stop.is_set():
                ready, _, _ = select.select([sys.stdin], [], [], _POLL)
                if ready:
                    line = sys.stdin.readline()
                    if not line:  # Ctrl-D / end of input
                        print()  # the shell prompt on its own line
                        raise EOFError
                    return line.rstrip("\n")
            raise EOFError
        finally:
            with self._screen:
                self._prompt = None

    def _edit(self, fd: int) -> str:
        """One line typed in cbreak mode, echoed and edited here."""
        decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        escape = False  # inside an escape sequence (an arrow key): ignored
        while not self.stop.is_set():
            ready, _, _ = select.select([fd], [], [], _POLL)
            if not ready:
                continue
            data = os.read(fd, 1024)
            if not data:
                raise EOFError
            for key in decode(data):
                with self._screen:
                    if escape:
                        escape = not (key.isalpha() or key == "~")
                    elif key == "\x1b":
                        escape = True
                    elif key in "\r\n":
                        sys.stdout.write("\n")
                        sys.stdout.flush()
                        return self._typed
                    elif key == "\x03":  # Ctrl-C read as a key (a terminal without ISIG)
                        signal.raise_signal(signal.SIGINT)
                    elif key == "\x04":  # Ctrl-D: the end on an empty line
                        if not self._typed:
                            sys.stdout.write("\n")  # the shell prompt on its own line
                            sys.stdout.flush()
                            raise EOFError
                    elif key in "\x7f\x08":  # Backspace
                        if self._typed:
                            self._typed = self._typed[:-1]
                            sys.stdout.write("\b \b")
                    elif key == "\x15":  # Ctrl-U: the whole line
                        self._typed = ""
                        self._redraw("")
                    elif key.isprintable():
                        self._typed += key
                        sys.stdout.write(key)
                    sys.stdout.flush()
        raise EOFError

    def _redraw(self, above: str) -> None:
        """``above`` (if any) on its own line where the prompt was, then the prompt and
        what was typed so far (hold ``_screen``)."""
        sys.stdout.write("\r\x1b[K" + (above + "\n" if above else ""))
        if self._prompt is not None:
            sys.stdout.write(self._prompt + self._typed)
        sys.stdout.flush()

    def interject(self, text: str) -> None:
        """Print ``text`` now: while a line is being typed, above its prompt, which is
        redrawn with what was typed so far (piped input: on a line of its own)."""
        with self._screen:
            if self._prompt is None:
                print(text, flush=True)
            elif self._fd is not None:
                self._redraw(text)
            else:
                sys.stdout.write("\n" + text + "\n" + self._prompt)
                sys.stdout.flush()


def run_repl(flow_ref: str | None, model: str | None) -> int:
    """Chat with ``flow_ref`` (the example assistant if None) on stdin/stdout."""
    flow = _make_flow(flow_ref, model)
    flow.check_persistence()  # an unusable store: one line now, not every turn lost
    name = type(flow).__name__ if flow_ref is not None else "the example assistant"
    brain = f"open questions go to {model}" if model else (
        "rule-based (no LLM: --model MODEL to add one)" if flow_ref is None else
        "its own configuration")
    print(f"voxflow chat · {name} · {brain}")
    print("type a message and press Enter; exit, quit or Ctrl-D to end, Ctrl-C to abort",
          flush=True)
    lines = _Lines()
    ending = _Ending(lines)

    async def chat() -> None:
        task = asyncio.current_task()
        assert task is not None
        ending.listen(asyncio.get_running_loop(), task)
        try:
            await chat_text(flow, read=lines, interject=lines.interject)
        finally:
            lines.stop.set()  # the reading thread gives the terminal back
            # what is left is asyncio.run's own close, which waits for every thread of
            # its executor: a job blocked in one would hold `exit` forever
            ending.cut_after(EXIT_INTERRUPTED if ending.interrupted else EXIT_OK)

    try:
        with lines:  # (the terminal's modes restored however the chat ends)
            asyncio.run(chat())
    except (KeyboardInterrupt, asyncio.CancelledError):
        ending.closed()
        lines.stop.set()
        print(flush=True)
        return EXIT_INTERRUPTED
    ending.closed()
    if ending.interrupted:  # Ctrl-C as the chat was ending anyway
        print(flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK


class _Ending:
    """How the chat ends, whatever still runs: Ctrl-C cancels it, and a chat that has
    not closed :data:`_CLOSE_GRACE` seconds after Ctrl-C (or after ``exit``) is cut, the
    terminal given back; a second Ctrl-C cuts it at once.

    Ctrl-C comes through the loop's own signal handling, whose wake-up fd is written
    whichever thread the signal lands on (a Python-level handler runs only when the main
    thread next runs bytecode: CI once saw a ^C, then nothing for 30 s). Where the loop
    has none (Windows) a plain handler hands it to the loop."""

    def __init__(self, lines: _Lines) -> None:
        self._lines = lines
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self.interrupted = False

    def listen(self, loop: asyncio.AbstractEventLoop, chat: asyncio.Task[None]) -> None:
        """Take Ctrl-C for ``chat`` (call on ``loop``, in the main thread)."""
        try:
            loop.add_signal_handler(signal.SIGINT, self._ctrl_c, chat)
        except NotImplementedError:  # (Windows)
            signal.signal(signal.SIGINT,
                          lambda *_: loop.call_soon_threadsafe(self._ctrl_c, chat))

    def _ctrl_c(self, chat: asyncio.Task[None]) -> None:
        if self.interrupted:  # a second Ctrl-C: now
            self._cut(EXIT_INTERRUPTED)
        self.interrupted = True
        self.cut_after(EXIT_INTERRUPTED)
        chat.cancel()

    def cut_after(self, code: int) -> None:
        """Exit with ``code`` in :data:`_CLOSE_GRACE` seconds unless :meth:`closed`."""
        timer = threading.Timer(_CLOSE_GRACE, self._cut, args=(code,))
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def closed(self) -> None:
        """The chat has closed: nothing is cut."""
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()

    def _cut(self, code: int) -> None:
        """The chat still closing: the terminal given back, the shell prompt on a new
        line, exit ``code``, whatever was still running (said, unless Ctrl-C asked)."""
        self._lines.__exit__()
        if code != EXIT_INTERRUPTED:
            sys.stdout.write("(a background job that would not stop was cut off)")
        sys.stdout.write("\n")
        sys.stdout.flush()
        os._exit(code)
