"""Questions for `accel config`: arrow-key menus in a real terminal, typed answers otherwise.

In a terminal (stdin and stdout both TTYs) a choice is a menu moved with the arrow keys
(or a digit) and confirmed with Enter. When stdin is piped, every question is one line:
the options are numbered and the answer may be the number or the value itself, so a
script can feed `accel config` its answers. Plain Python (termios), no dependency.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["Prompter"]

_UP, _DOWN = ("\x1b[A", "\x1bOA"), ("\x1b[B", "\x1bOB")


class Prompter:
    """Asks questions on ``stdin``/``stdout``; ``interactive`` None: detect a terminal."""

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 interactive: bool | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        if interactive is None:
            interactive = self.stdin.isatty() and self.stdout.isatty()
        self.interactive = interactive

    # -- plumbing -----------------------------------------------------------------------
    def _write(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def _readline(self) -> str:
        line = self.stdin.readline()
        if line == "":
            raise EOFError("no more answers on stdin (the questionnaire was cut short)")
        if not self.interactive:
            self._write(line.strip() + "\n")  # piped answers are not echoed by a terminal
        return line.strip()

    def _ask(self, question: str, convert: Callable[[str], Any], default: Any,
             error: str) -> Any:
        suffix = f" [{default}]" if default not in (None, "") else ""
        while True:
            self._write(f"{question}{suffix}: ")
            answer = self._readline()
            if answer == "" and default is not None:
                return default
            try:
                return convert(answer)
            except ValueError:
                self._write(f"{error}, got {answer!r}; try again.\n")

    # -- questions ----------------------------------------------------------------------
    def text(self, question: str, default: str | None = None) -> str:
        return self._ask(question, str, default, "Please type an answer")

    def integer(self, question: str, default: int | None = None, minimum: int = 0) -> int:
        def convert(text: str) -> int:
            value = int(text)
            if value < minimum:
                raise ValueError
            return value
        return self._ask(question, convert, default, f"Please type a whole number >= {minimum}")

    def number(self, question: str, default: float | None = None) -> float:
        return self._ask(question, float, default, "Please type a number")

    def yes_no(self, question: str, default: bool = False) -> bool:
        def convert(text: str) -> bool:
            low = text.lower()
            if low in ("y", "yes", "true", "1"):
                return True
            if low in ("n", "no", "false", "0"):
                return False
            raise ValueError
        shown = "yes/NO" if not default else "YES/no"
        self._write(f"{question} [{shown}]: ")
        while True:
            answer = self._readline()
            if answer == "":
                return default
            try:
                return convert(answer)
            except ValueError:
                self._write(f"Please answer yes or no, got {answer!r}: ")

    def choice(self, question: str, options: Sequence[str], default: int = 0) -> int:
        """Index of the chosen option."""
        if self.interactive:
            return self._menu(question, options, default)
        self._write(question + "\n")
        for i, option in enumerate(options):
            self._write(f"  [{i}] {option}\n")
        lowered = [o.lower() for o in options]

        def convert(text: str) -> int:
            if text.isdigit() and int(text) < len(options):
                return int(text)
            if text.lower() in lowered:
                return lowered.index(text.lower())
            raise ValueError
        return self._ask("Please select a choice", convert, default,
                         f"Type a number 0-{len(options) - 1} or one of the options")

    def _menu(self, question: str, options: Sequence[str], current: int) -> int:
        import termios
        import tty

        fd = self.stdin.fileno()
        saved = termios.tcgetattr(fd)
        self._write(question + " (arrow keys, Enter to confirm)\n")
        self._draw(options, current, first=True)
        try:
            tty.setcbreak(fd)
            current = self._read_keys(fd, options, current)
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        self._write(f"Selected: {options[current]}\n")
        return current

    def _read_keys(self, fd: int, options: Sequence[str], current: int) -> int:
        """Move with the arrows (or jump with a digit) until Enter; returns the index."""
        while True:
            chunk = os.read(fd, 64).decode(errors="ignore")
            i = 0
            while i < len(chunk):
                key = chunk[i:i + 3] if chunk[i] == "\x1b" else chunk[i]
                i += len(key)
                if key in ("\r", "\n"):
                    return current
                if key == "\x03":
                    raise KeyboardInterrupt
                if key in _UP:
                    current = (current - 1) % len(options)
                elif key in _DOWN:
                    current = (current + 1) % len(options)
                elif key.isdigit() and int(key) < len(options):
                    current = int(key)
                self._draw(options, current)

    def _draw(self, options: Sequence[str], current: int, first: bool = False) -> None:
        if not first:
            self._write(f"\x1b[{len(options)}A")  # back to the first option's line
        for i, option in enumerate(options):
            mark = "->" if i == current else "  "
            self._write(f"\r\x1b[2K {mark} {option}\n")
