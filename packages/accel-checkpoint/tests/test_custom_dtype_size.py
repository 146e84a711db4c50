"""dtype_byte_size accounts for the quantised CustomDtype formats next to torch dtypes."""

from __future__ import annotations

import torch
from accel_checkpoint.weights import dtype_byte_size
from accel_state.enums import CustomDtype


def test_custom_dtypes_have_their_fractional_sizes():
    assert dtype_byte_size(CustomDtype.FP8) == 1
    assert dtype_byte_size(CustomDtype.INT4) == 0.5
    assert dtype_byte_size(CustomDtype.INT2) == 0.25
    assert dtype_byte_size(torch.float16) == 2  # torch dtypes unchanged
