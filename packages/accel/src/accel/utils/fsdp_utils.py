"""Accelerate's ``accelerate.utils.fsdp_utils`` path: FSDP checkpoint helpers of
accel-checkpoint (``save_fsdp_model`` & co., ``merge_fsdp_weights``), the FSDP option
names and the FSDP2 building blocks (``fsdp2_prepare_model`` & co.) of accel-parallel."""

from __future__ import annotations

from accel_checkpoint.fsdp_io import (
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from accel_checkpoint.merge import merge_fsdp_weights
from accel_parallel.fsdp.compat import (
    compile_regions_fsdp2,
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    ensure_weights_retied,
    fsdp2_apply_ac,
    fsdp2_canonicalize_names,
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
    get_parameters_from_modules,
)
from accel_parallel.fsdp.plugin import (
    FSDP2_STATE_DICT_TYPE,
    FSDP_AUTO_WRAP_POLICY,
    FSDP_BACKWARD_PREFETCH,
    FSDP_SHARDING_STRATEGY,
    FSDP_STATE_DICT_TYPE,
)

from accel._accelerate_helpers import get_fsdp2_grad_scaler
from accel._module_compat import forward_to

__all__ = ["FSDP2_STATE_DICT_TYPE", "FSDP_AUTO_WRAP_POLICY", "FSDP_BACKWARD_PREFETCH",
           "FSDP_SHARDING_STRATEGY", "FSDP_STATE_DICT_TYPE", "load_fsdp_model",
           "load_fsdp_optimizer", "merge_fsdp_weights", "save_fsdp_model", "save_fsdp_optimizer",
           "disable_fsdp_ram_efficient_loading", "enable_fsdp_ram_efficient_loading",
           "fsdp2_canonicalize_names", "compile_regions_fsdp2", "ensure_weights_retied",
           "fsdp2_apply_ac", "fsdp2_load_full_state_dict", "fsdp2_prepare_auto_wrap_policy",
           "fsdp2_prepare_model", "fsdp2_switch_optimizer_parameters",
           "get_parameters_from_modules"]

__all__ += ["get_fsdp2_grad_scaler"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.logging")
