"""Accelerate's ``accelerate.utils.constants`` path: accel-checkpoint's on-disk names,
accel-parallel's FSDP option names, and Accelerate's other constants.

The version thresholds and SageMaker / launcher lists below are Accelerate's values, kept
for scripts and libraries that read them (``if is_torch_version(">=",
FSDP2_PYTORCH_VERSION)``); accel itself does not branch on them.
"""

from __future__ import annotations

import operator as _op

from accel_checkpoint.constants import (
    FSDP_MODEL_NAME,
    MODEL_NAME,
    OPTIMIZER_NAME,
    PROFILE_PATTERN_NAME,
    RNG_STATE_NAME,
    SAFE_MODEL_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    SAFE_WEIGHTS_PATTERN_NAME,
    SAMPLER_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    WEIGHTS_PATTERN_NAME,
)
from accel_inference.layerwise import CASTABLE_LAYERS as SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
from accel_launch.config_classes import (
    SAGEMAKER_PYTHON_VERSION,
    SAGEMAKER_PYTORCH_VERSION,
    SAGEMAKER_TRANSFORMERS_VERSION,
)
from accel_parallel.fsdp.plugin import (
    FSDP2_STATE_DICT_TYPE,
    FSDP_AUTO_WRAP_POLICY,
    FSDP_BACKWARD_PREFETCH,
    FSDP_SHARDING_STRATEGY,
    FSDP_STATE_DICT_TYPE,
)

from accel._module_compat import forward_to

SAGEMAKER_PARALLEL_EC2_INSTANCES = ["ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4dn.24xlarge"]
FSDP_PYTORCH_VERSION = "2.1.0.a0+32f93b1"
FSDP2_PYTORCH_VERSION = "2.6.0"
DTENSOR_PYTORCH_VERSION = "2.5.0"
DEEPSPEED_MULTINODE_LAUNCHERS = ["pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh",
                                 "slurm"]
TORCH_DYNAMO_MODES = ["default", "reduce-overhead", "max-autotune"]
ELASTIC_LOG_LINE_PREFIX_TEMPLATE_PYTORCH_VERSION = "2.2.0"
XPU_PROFILING_AVAILABLE_PYTORCH_VERSION = "2.4.0"
MITA_PROFILING_AVAILABLE_PYTORCH_VERSION = "2.1.0"
BETA_TP_AVAILABLE_PYTORCH_VERSION = "2.3.0"
BETA_TP_AVAILABLE_TRANSFORMERS_VERSION = "4.52.0"
BETA_CP_AVAILABLE_PYTORCH_VERSION = "2.6.0"
BETA_SP_AVAILABLE_DEEPSPEED_VERSION = "0.18.2"
#: comparison text -> function, as ``compare_versions`` reads it
STR_OPERATION_TO_FUNC = {">": _op.gt, ">=": _op.ge, "==": _op.eq, "!=": _op.ne, "<=": _op.le,
                         "<": _op.lt}
#: the ``torch.distributed.run`` options Accelerate forwards
TORCH_LAUNCH_PARAMS = ["nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id",
                       "rdzv_conf", "standalone", "max_restarts", "monitor_interval",
                       "start_method", "role", "module", "m", "no_python", "run_path",
                       "log_dir", "r", "redirects", "t", "tee", "node_rank", "master_addr",
                       "master_port"]
CUDA_DISTRIBUTED_TYPES = ["DEEPSPEED", "MULTI_GPU", "FSDP", "MEGATRON_LM", "TP"]
TORCH_DISTRIBUTED_OPERATION_TYPES = [*CUDA_DISTRIBUTED_TYPES, "MULTI_NPU", "MULTI_MLU",
                                     "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_CPU",
                                     "MULTI_HPU", "MULTI_NEURON"]

_ACCELERATE_ONLY = [
    "SAGEMAKER_PYTORCH_VERSION", "SAGEMAKER_PYTHON_VERSION", "SAGEMAKER_TRANSFORMERS_VERSION",
    "SAGEMAKER_PARALLEL_EC2_INSTANCES", "FSDP_PYTORCH_VERSION", "FSDP2_PYTORCH_VERSION",
    "DTENSOR_PYTORCH_VERSION", "DEEPSPEED_MULTINODE_LAUNCHERS", "TORCH_DYNAMO_MODES",
    "ELASTIC_LOG_LINE_PREFIX_TEMPLATE_PYTORCH_VERSION", "XPU_PROFILING_AVAILABLE_PYTORCH_VERSION",
    "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION", "BETA_TP_AVAILABLE_PYTORCH_VERSION",
    "BETA_TP_AVAILABLE_TRANSFORMERS_VERSION", "BETA_CP_AVAILABLE_PYTORCH_VERSION",
    "BETA_SP_AVAILABLE_DEEPSPEED_VERSION", "STR_OPERATION_TO_FUNC", "TORCH_LAUNCH_PARAMS",
    "CUDA_DISTRIBUTED_TYPES", "TORCH_DISTRIBUTED_OPERATION_TYPES",
]

__all__ = [*_ACCELERATE_ONLY, "FSDP2_STATE_DICT_TYPE", "FSDP_AUTO_WRAP_POLICY",
           "FSDP_BACKWARD_PREFETCH", "FSDP_MODEL_NAME", "FSDP_SHARDING_STRATEGY",
           "FSDP_STATE_DICT_TYPE", "MODEL_NAME", "OPTIMIZER_NAME", "PROFILE_PATTERN_NAME",
           "RNG_STATE_NAME", "SAFE_MODEL_NAME", "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME",
           "SAFE_WEIGHTS_PATTERN_NAME", "SAMPLER_NAME", "SCALER_NAME", "SCHEDULER_NAME",
           "WEIGHTS_INDEX_NAME", "WEIGHTS_NAME", "WEIGHTS_PATTERN_NAME",
           "SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")
