"""Variables of torch.compile (Accelerate's ACCELERATE_DYNAMO_* names), read by
accel_parallel.TorchDynamoPlugin for fields left as None; `accel launch --dynamo_*` writes them."""

from __future__ import annotations

from accel_state.env._core import _var

DYNAMO_BACKEND = _var(
    "ACCEL_DYNAMO_BACKEND", "torch.compile backend for prepared models: no (default), eager, "
    "aot_eager, inductor, cudagraphs, ... (accel_parallel.DynamoBackend).",
    "ACCELERATE_DYNAMO_BACKEND")
DYNAMO_MODE = _var(
    "ACCEL_DYNAMO_MODE", "torch.compile mode: default, reduce-overhead, max-autotune or "
    "max-autotune-no-cudagraphs.", "ACCELERATE_DYNAMO_MODE")
DYNAMO_USE_FULLGRAPH = _var(
    "ACCEL_DYNAMO_USE_FULLGRAPH", "1 to require one graph per compiled module (a graph break "
    "is an error).", "ACCELERATE_DYNAMO_USE_FULLGRAPH")
DYNAMO_USE_DYNAMIC = _var(
    "ACCEL_DYNAMO_USE_DYNAMIC", "1 to trace with dynamic shapes, 0 to specialise on every "
    "shape; unset: torch decides after the first recompilation.", "ACCELERATE_DYNAMO_USE_DYNAMIC")
DYNAMO_USE_REGIONAL_COMPILATION = _var(
    "ACCEL_DYNAMO_USE_REGIONAL_COMPILATION", "1 to compile each repeated block (the layers of a "
    "transformer) once instead of the whole model: much shorter compile time, same speed.",
    "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION")

__all__ = [name for name in dict(globals()) if name.isupper()]
