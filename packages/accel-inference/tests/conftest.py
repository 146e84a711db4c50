from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _load_models():
    spec = importlib.util.spec_from_file_location("accel_inference_test_models",
                                                  Path(__file__).with_name("models.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def models():
    return _load_models()
