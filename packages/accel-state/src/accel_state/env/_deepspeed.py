"""Variables read by accel-parallel's DeepSpeed plugin (Accelerate's ACCELERATE_DEEPSPEED_*).

``accel launch`` (and Accelerate's launcher) write them; ``DeepSpeedPlugin`` reads them for
fields left unset. An explicit argument always wins over a variable.
"""

from __future__ import annotations

from accel_state.env._core import _var

USE_DEEPSPEED = _var("ACCEL_USE_DEEPSPEED", "1 to train with DeepSpeed ZeRO (a DeepSpeedPlugin "
                     "is built from the ACCEL_DEEPSPEED_* variables). Set by `accel launch "
                     "--use_deepspeed`.", "ACCELERATE_USE_DEEPSPEED")
DEEPSPEED_CONFIG_FILE = _var(
    "ACCEL_DEEPSPEED_CONFIG_FILE", "Path of a DeepSpeed JSON config (DeepSpeedPlugin's "
    "hf_ds_config); its values may be \"auto\".", "ACCELERATE_DEEPSPEED_CONFIG_FILE")
DEEPSPEED_ZERO_STAGE = _var("ACCEL_DEEPSPEED_ZERO_STAGE", "ZeRO stage 0, 1, 2 or 3 (default 2).",
                            "ACCELERATE_DEEPSPEED_ZERO_STAGE")
DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE = _var(
    "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "Where ZeRO 2/3 keep optimizer states: none "
    "(default), cpu or nvme.", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE")
DEEPSPEED_OFFLOAD_PARAM_DEVICE = _var(
    "ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "Where ZeRO-3 keeps parameters: none (default), cpu "
    "or nvme.", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE")
DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH = _var(
    "ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "Directory for optimizer states offloaded to "
    "nvme.", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH")
DEEPSPEED_OFFLOAD_PARAM_NVME_PATH = _var(
    "ACCEL_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "Directory for parameters offloaded to nvme.",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH")
DEEPSPEED_ZERO3_INIT = _var(
    "ACCEL_DEEPSPEED_ZERO3_INIT", "1 to build models partitioned under ZeRO-3 "
    "(DeepSpeedPlugin.zero3_init_context_manager, transformers' from_pretrained).",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT")
DEEPSPEED_ZERO3_SAVE_16BIT_MODEL = _var(
    "ACCEL_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "1 to gather ZeRO-3 weights in 16 bits when the "
    "model is saved.", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL")
DEEPSPEED_MOE_LAYER_CLS_NAMES = _var(
    "ACCEL_DEEPSPEED_MOE_LAYER_CLS_NAMES", "Comma-separated class names of mixture-of-experts "
    "layers (ZeRO-3 leaf modules).", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES")
GRADIENT_ACCUMULATION_STEPS = _var(
    "ACCEL_GRADIENT_ACCUMULATION_STEPS", "Micro-batches per optimizer step (read by the "
    "DeepSpeed plugin when its gradient_accumulation_steps is unset).",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
GRADIENT_CLIPPING = _var(
    "ACCEL_GRADIENT_CLIPPING", "Maximum gradient norm (read by the DeepSpeed plugin when its "
    "gradient_clipping is unset).", "ACCELERATE_GRADIENT_CLIPPING")
DEEPSPEED_SHM_COMM = _var(
    "ACCEL_DEEPSPEED_SHM_COMM", "0 to keep DeepSpeed from building and using its shared-memory "
    "all-reduce op on CPU (g++ compiles it on first use, about a minute); collectives then go "
    "through torch.distributed (gloo). Default: DeepSpeed's choice.")
RUN_SLOW = _var("ACCEL_RUN_SLOW", "1 to run the tests marked slow (they compile DeepSpeed's "
                "cpu_adam: minutes).")

__all__ = [name for name in dict(globals()) if name.isupper()]
