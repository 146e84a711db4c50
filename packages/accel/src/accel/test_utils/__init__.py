"""Test helpers shipped with accel (Accelerate's ``accelerate.test_utils`` path).

``accel.test_utils.scripts.test_script`` is the end-to-end check `accel test` launches.
"""

from __future__ import annotations
