"""Accelerate's ``accelerate.utils.environment`` path."""

from __future__ import annotations

from accel_state.detect import CPUInformation, get_cpu_distributed_information
from accel_state.device_info import (
    check_cuda_fp8_capability,
    check_cuda_p2p_ib_support,
    check_os_kernel,
    get_current_device_type,
    get_driver_version,
    get_gpu_info,
    override_numa_affinity,
    set_numa_affinity,
)
from accel_state.env import (
    clear_environment,
    convert_dict_to_env_variables,
    get_int_from_env,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    purge_accelerate_environment,
    str_to_bool,
)

from accel._accelerate_helpers import are_libraries_initialized
from accel._module_compat import forward_to

__all__ = ["CPUInformation", "clear_environment", "convert_dict_to_env_variables",
           "get_cpu_distributed_information", "get_int_from_env", "parse_choice_from_env",
           "parse_flag_from_env", "patch_environment", "purge_accelerate_environment",
           "str_to_bool", "check_cuda_fp8_capability", "check_cuda_p2p_ib_support",
           "check_os_kernel", "get_current_device_type", "get_driver_version", "get_gpu_info",
           "override_numa_affinity", "set_numa_affinity"]

__all__ += ["are_libraries_initialized"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")
