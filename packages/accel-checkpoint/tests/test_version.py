"""The reserved package installs, imports and reports the version of its distribution."""

from __future__ import annotations

import importlib.metadata

import accel_checkpoint


def test_version_matches_distribution():
    assert accel_checkpoint.__version__ == importlib.metadata.version("accel-checkpoint")
