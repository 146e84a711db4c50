"""get_logger: main-process-only by default, level from ACCEL_LOG_LEVEL, clear error when unset."""

from __future__ import annotations

import logging

import pytest
from accel_state import PartialState
from accel_state.logging import get_logger


def test_logger_needs_state():
    logger = get_logger("accel.test.nostate")
    with pytest.raises(RuntimeError, match="PartialState"):
        logger.info("hello")


def test_logs_on_main_process_and_warning_once(caplog, monkeypatch):
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "info")
    PartialState(cpu=True)
    logger = get_logger("accel.test.main")
    assert logger.logger.level == logging.INFO
    with caplog.at_level(logging.INFO, logger="accel.test.main"):
        logger.info("visible", main_process_only=True)
        logger.info("in order", main_process_only=False, in_order=True)
        logger.warning_once("only once")
        logger.warning_once("only once")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["visible", "in order", "only once"]
