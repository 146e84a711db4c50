"""Accelerate's N-D parallelism names at Accelerate's paths, as the micro-package's objects."""

from __future__ import annotations


def test_parallelism_names_are_accel_parallels_own():
    import accel
    import accel.parallelism_config
    import accel.utils
    import accel_parallel

    assert accel.ParallelismConfig is accel_parallel.ParallelismConfig
    assert accel.parallelism_config.ParallelismConfig is accel_parallel.ParallelismConfig
    for name in ("ParallelismConfig", "TorchTensorParallelPlugin", "TorchTensorParallelConfig",
                 "TorchContextParallelConfig"):
        assert getattr(accel.utils, name) is getattr(accel_parallel, name), name
    assert "ParallelismConfig" in dir(accel)
