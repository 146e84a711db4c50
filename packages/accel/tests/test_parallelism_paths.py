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


def test_pipeline_parallel_config_sits_next_to_parallelism_config():
    """accel's own pipeline options (Accelerate has no PP training, so no such class) where
    its config dataclasses are: ``accel``, ``accel.utils`` and ``accel.utils.dataclasses``,
    all the one of ``accel_parallel.pipeline``."""
    import accel
    import accel.utils
    import accel.utils.dataclasses
    from accel_parallel.pipeline import PipelineParallelConfig

    assert accel.PipelineParallelConfig is PipelineParallelConfig
    assert accel.utils.PipelineParallelConfig is PipelineParallelConfig
    assert accel.utils.dataclasses.PipelineParallelConfig is PipelineParallelConfig
    assert "PipelineParallelConfig" in dir(accel) and "PipelineParallelConfig" in accel.__all__
    config = accel.ParallelismConfig(pp_size=2, pp_handler=accel.PipelineParallelConfig(
        schedule="gpipe", num_microbatches=4))
    assert config.pp_handler.schedule == "gpipe"
