"""accel_launch.menu: Accelerate's BulletMenu and its terminal helpers, on a real
pseudo-terminal (arrow keys, digits, Enter, Ctrl-C) and with piped input (numbered)."""

from __future__ import annotations

import io
import os
import sys
import tty as tty_module

import pytest

from accel_launch import menu


@pytest.fixture
def tty(monkeypatch):
    """stdin is the slave side of a pty; returns a function that types into it."""
    master, slave = os.openpty()
    tty_module.setraw(slave)  # as while a user types: bytes arrive in raw mode (Ctrl-C too)
    stdin = os.fdopen(slave, "r")
    monkeypatch.setattr(sys, "stdin", stdin)
    yield lambda keys: os.write(master, keys.encode())
    stdin.close()
    os.close(master)


def test_arrow_keys_move_and_enter_picks_on_a_terminal(tty, capsys):
    tty("\x1b[B\x1b[B\x1b[A\r")  # down, down, up, Enter
    assert menu.BulletMenu("Which?", ["a", "b", "c"]).run(default_choice=0) == 1
    out = capsys.readouterr().out
    assert "Which?" in out and "arrow or number keys" in out
    assert "\x1b[?25l" in out and "\x1b[?25h" in out  # cursor hidden, then shown again
    assert out.endswith("\x1b[32mb\x1b[0m\n")  # the pick, in green


def test_digits_jump_and_moves_stop_at_the_ends(tty):
    tty("2\x1b[B\x1b[B\r")  # jump to 2, down twice past the end: stays
    assert menu.BulletMenu(None, ["a", "b", "c"]).run() == 2
    tty("\x1bOA\x1bOA\r")  # application-mode arrows, up past the top: stays at 0
    assert menu.BulletMenu(None, ["a", "b"]).run(default_choice=1) == 0


def test_ctrl_c_interrupts(tty):
    tty("\x03")
    with pytest.raises(KeyboardInterrupt):
        menu.BulletMenu("q", ["a", "b"]).run()


def test_without_a_terminal_the_choices_are_numbered(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("7\nx\n1\n"))
    assert menu.BulletMenu("Pick", ["cpu", "gpu"]).run() == 1
    out = capsys.readouterr().out
    assert "[0] cpu" in out and "[1] gpu" in out
    assert "'7' is not an index from 0 to 1" in out and "'x' is not" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert menu.BulletMenu("Pick", ["cpu", "gpu"]).run(default_choice=1) == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(EOFError):
        menu.BulletMenu("Pick", ["cpu", "gpu"]).run()


def test_a_default_outside_the_choices_is_refused():
    with pytest.raises(ValueError, match="default_choice 3 is not an index of the 2"):
        menu.BulletMenu("Pick", ["a", "b"]).run(default_choice=3)


def test_get_character_decodes_keys(tty):
    tty("x\x1b[C\x1b[Z\x01\n")
    assert menu.get_character() == "x"
    assert menu.get_character() == chr(menu.KEYMAP["right"])
    assert menu.get_character() == menu.KEYMAP["undefined"]  # not an arrow
    assert menu.get_character() == menu.KEYMAP["undefined"]  # not printable
    assert menu.get_character() == "\r"  # a line feed is Enter


def test_register_binds_marked_methods_to_keys(monkeypatch):
    @menu.register
    class Keys:
        @menu.mark(ord("q"))
        def quit(self):
            return "quit"

        @menu.mark_multiple(ord("a"), ord("b"))
        def letter(self):
            return chr(self.current_selection)

    assert type(Keys) is menu.KeyHandler
    assert set(Keys.key_handler) == {ord("q"), ord("a"), ord("b")}
    keys = iter(["b", "z", "q"])
    monkeypatch.setattr(menu, "get_character", lambda: next(keys))
    handler = Keys()
    assert handler.handle_input() == "b"
    assert handler.handle_input() is None  # unbound key
    assert handler.handle_input() == "quit"


def test_cursor_and_line_helpers_write_ansi(capsys):
    with menu.hide():
        menu.move_cursor(2, "up")
        menu.writeColor("hi", 31, "\n")
    menu.reset_cursor()
    menu.linebreak()
    assert capsys.readouterr().out.startswith("\x1b[?25l\x1b[2A\x1b[31mhi\x1b[0m\n\x1b[?25h\r")
    with pytest.raises(ValueError, match="direction must be one of"):
        menu.move_cursor(1, "sideways")
