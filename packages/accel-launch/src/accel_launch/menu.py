"""A terminal selection menu with Accelerate's names (``accelerate.commands.menu``).

Scripts written for Accelerate's ``config`` helpers build ``BulletMenu(prompt, choices)``
and call ``run(default_choice)`` for the chosen index. In a terminal the choices are moved
through with the arrow keys (or a digit) and picked with Enter; when stdin is not a terminal
(piped answers, CI, notebooks) the menu falls back to a numbered list and reads one index
per line. Also here, under Accelerate's names: the raw key reader (``get_character``), the
key-code table (``KEYMAP``), the cursor and line helpers, and the ``mark``/``register``
decorators that bind keys to a class's methods. Plain Python (termios), no dependency.
`accel config` itself asks through :mod:`accel_launch.prompts`.
"""

from __future__ import annotations

import enum
import os
import shutil
import string
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "ARROW_KEY_FLAG", "BulletMenu", "CURSOR_TO_CHAR", "Direction", "KEYMAP", "KeyHandler",
    "TERMINAL_WIDTH", "clear_line", "forceWrite", "get_character", "get_raw_chars", "hide",
    "hide_cursor", "in_colab", "linebreak", "mark", "mark_multiple", "move_cursor", "register",
    "reset_cursor", "show_cursor", "writeColor",
]

# -- key codes ------------------------------------------------------------------------------
#: added to an arrow's final escape byte (A-D), so arrows never collide with typed letters
ARROW_KEY_FLAG = 1 << 8
KEYMAP: dict[str, int] = {
    "tab": ord("\t"), "newline": ord("\r"), "esc": 27, "mod_int": 91, "interrupt": 3,
    "up": ord("A") + ARROW_KEY_FLAG, "down": ord("B") + ARROW_KEY_FLAG,
    "right": ord("C") + ARROW_KEY_FLAG, "left": ord("D") + ARROW_KEY_FLAG,
    "undefined": sys.maxsize, "insert": 50, "delete": 51, "pg_up": 53, "pg_down": 54,
}
KEYMAP["arrow_begin"], KEYMAP["arrow_end"] = KEYMAP["up"], KEYMAP["left"]
KEYMAP.update({str(digit): ord(str(digit)) for digit in range(10)})


def get_raw_chars() -> str:
    """One character from stdin, read in raw mode (no echo, no line buffering)."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # not TCSAFLUSH: keep the rest of an arrow's bytes
        return os.read(fd, 1).decode(errors="replace")
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def get_character() -> str | int:
    """The next key: a printable character, Enter/Ctrl-C as themselves, an arrow as
    ``chr(KEYMAP[<arrow>])``; anything else is ``KEYMAP["undefined"]`` (an int)."""
    char = get_raw_chars()
    code = ord(char)
    if code in (KEYMAP["interrupt"], KEYMAP["newline"], ord("\n")):
        return "\r" if char == "\n" else char
    if code == KEYMAP["esc"]:
        follow = get_raw_chars()
        if ord(follow) not in (KEYMAP["mod_int"], ord("O")):  # ESC [ X or ESC O X
            return KEYMAP["undefined"]
        final = ord(get_raw_chars()) + ARROW_KEY_FLAG
        return chr(final) if KEYMAP["arrow_begin"] <= final <= KEYMAP["arrow_end"] \
            else KEYMAP["undefined"]
    return char if char in string.printable else KEYMAP["undefined"]


# -- writing to the terminal ----------------------------------------------------------------
TERMINAL_WIDTH = shutil.get_terminal_size().columns
CURSOR_TO_CHAR = {"UP": "A", "DOWN": "B", "RIGHT": "C", "LEFT": "D"}


class Direction(enum.Enum):
    UP = 0
    DOWN = 1


def forceWrite(content: Any, end: str = "") -> None:  # noqa: N802 - Accelerate's name
    """Write and flush at once (the menu redraws in place)."""
    sys.stdout.write(str(content) + end)
    sys.stdout.flush()


def writeColor(content: Any, color: int, end: str = "") -> None:  # noqa: N802
    """Write ``content`` in ANSI colour ``color`` (e.g. 32, green)."""
    forceWrite(f"\x1b[{color}m{content}\x1b[0m", end)


def reset_cursor() -> None:
    forceWrite("\r")


def move_cursor(num_lines: int, direction: str) -> None:
    """Move the cursor ``num_lines`` up/down/left/right (``direction`` in CURSOR_TO_CHAR)."""
    key = direction.upper()
    if key not in CURSOR_TO_CHAR:
        raise ValueError(f"move_cursor direction must be one of {sorted(CURSOR_TO_CHAR)}, "
                         f"got {direction!r}")
    forceWrite(f"\x1b[{num_lines}{CURSOR_TO_CHAR[key]}")


def clear_line() -> None:
    forceWrite(" " * TERMINAL_WIDTH)
    reset_cursor()


def linebreak() -> None:
    reset_cursor()
    forceWrite("-" * TERMINAL_WIDTH)


def hide_cursor() -> None:
    forceWrite("\x1b[?25l")


def show_cursor() -> None:
    forceWrite("\x1b[?25h")


@contextmanager
def hide() -> Iterator[None]:
    """The cursor hidden for the block, shown again however it ends."""
    hide_cursor()
    try:
        yield
    finally:
        show_cursor()


# -- binding keys to methods ----------------------------------------------------------------
def mark(key: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Bind the decorated method to the key code ``key`` (see :func:`register`)."""
    return mark_multiple(key)


def mark_multiple(*keys: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        function.handle_key = [*getattr(function, "handle_key", []), *keys]  # type: ignore
        return function
    return decorator


class KeyHandler(type):
    """Metaclass: collects the marked methods into ``key_handler`` (key code -> method) and
    gives the class ``handle_input``, which reads a key and calls its method."""

    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> KeyHandler:
        cls = super().__new__(mcs, name, bases, attrs)
        handlers = dict(getattr(cls, "key_handler", {}))
        for value in attrs.values():
            for key in getattr(value, "handle_key", []):
                handlers[key] = value
        cls.key_handler = handlers
        cls.handle_input = KeyHandler.handle_input
        return cls

    @staticmethod
    def handle_input(self: Any) -> Any:
        """Read one key; run its method (returning what it returns), else return None."""
        char = get_character()
        code = char if isinstance(char, int) else ord(char)
        handler = self.key_handler.get(code)
        if handler is None:
            return None
        self.current_selection = code
        return handler(self)


def register(cls: type) -> type:
    """Class decorator: rebuild ``cls`` with :class:`KeyHandler` so its marked keys work."""
    return KeyHandler(cls.__name__, cls.__bases__, dict(cls.__dict__))


# -- the menu -------------------------------------------------------------------------------
#: Accelerate answers by typed index inside Google Colab, which has no raw terminal
in_colab = "google.colab" in sys.modules


@register
class BulletMenu:
    """Pick one of ``choices``: arrows/digits and Enter on a terminal, a typed index
    otherwise. ``run(default_choice)`` returns the chosen index."""

    def __init__(self, prompt: str | None = None, choices: Sequence[str] = ()) -> None:
        self.position = 0
        self.choices = list(choices)
        self.prompt = prompt
        self.arrow_char = "➔ "

    def write_choice(self, index: int, end: str = "") -> None:
        writeColor(self.choices[index], 32, end)

    def print_choice(self, index: int) -> None:
        if index == self.position:
            forceWrite(f" {self.arrow_char} ")
            self.write_choice(index)
        else:
            forceWrite(f"    {self.choices[index]}")
        reset_cursor()

    def move_direction(self, direction: Direction, num_spaces: int = 1) -> None:
        target = self.position + (num_spaces if direction is Direction.DOWN else -num_spaces)
        if not 0 <= target < len(self.choices):
            return
        old, self.position = self.position, target
        clear_line()
        self.print_choice(old)
        move_cursor(num_spaces, direction.name)
        self.print_choice(self.position)

    @mark(KEYMAP["up"])
    def move_up(self) -> None:
        self.move_direction(Direction.UP)

    @mark(KEYMAP["down"])
    def move_down(self) -> None:
        self.move_direction(Direction.DOWN)

    @mark(KEYMAP["newline"])
    def select(self) -> int:
        move_cursor(len(self.choices) - self.position, "DOWN")
        return self.position

    @mark(KEYMAP["interrupt"])
    def interrupt(self) -> None:
        move_cursor(len(self.choices) - self.position, "DOWN")
        raise KeyboardInterrupt

    @mark_multiple(*[KEYMAP[str(digit)] for digit in range(10)])
    def select_row(self) -> None:
        index = int(chr(self.current_selection))
        if index < len(self.choices) and index != self.position:
            step = index - self.position
            self.move_direction(Direction.DOWN if step > 0 else Direction.UP, abs(step))

    def run(self, default_choice: int = 0) -> int:
        """Show the menu and return the index picked."""
        if not 0 <= default_choice < len(self.choices):
            raise ValueError(f"default_choice {default_choice} is not an index of the "
                             f"{len(self.choices)} choices")
        if in_colab or not sys.stdin.isatty():
            return self._run_numbered(default_choice)
        if self.prompt:
            linebreak()
            forceWrite(self.prompt, "\n")
            forceWrite("Please select a choice using the arrow or number keys, and selecting "
                       "with enter", "\n")
        self.position = default_choice
        for index in range(len(self.choices)):
            self.print_choice(index)
            forceWrite("\n")
        move_cursor(len(self.choices) - self.position, "UP")
        with hide():
            choice = None
            while choice is None:
                choice = self.handle_input()
        reset_cursor()
        for _ in range(len(self.choices) + 1):
            move_cursor(1, "UP")
            clear_line()
        self.write_choice(choice, "\n")
        return choice

    def _run_numbered(self, default_choice: int) -> int:
        """No terminal: the numbered choices, then an index per line (empty: the default)."""
        if self.prompt:
            forceWrite(self.prompt, "\n")
        for index, choice in enumerate(self.choices):
            forceWrite(f"  [{index}] {choice}", "\n")
        while True:
            forceWrite(f"Please input a choice index (starting from 0), and press enter "
                       f"[{default_choice}]: ")
            answer = sys.stdin.readline()
            if answer == "":
                raise EOFError("stdin closed before a choice was given")
            answer = answer.strip()
            if answer == "":
                return default_choice
            if answer.isdigit() and int(answer) < len(self.choices):
                return int(answer)
            forceWrite(f"{answer!r} is not an index from 0 to {len(self.choices) - 1}.", "\n")
