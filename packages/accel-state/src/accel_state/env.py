"""The environment contract: every environment variable accel reads or the launcher sets.

This is the only module of accel that reads ``os.environ`` (DESIGN.md §4). Each
variable is declared once as an :class:`EnvVar` with a docstring; the launcher
writes them by name and the runtime reads them through :meth:`EnvVar.get`.
Our own names start with ``ACCEL_``; Accelerate's ``ACCELERATE_*`` spellings are
honoured as aliases so scripts and job files written for Accelerate keep working.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from accel_state.errors import ConfigurationError

__all__ = [
    "EnvVar",
    "ENV_VARS",
    "str_to_bool",
    "parse_flag_from_env",
    "parse_choice_from_env",
    "get_int_from_env",
    "read",
    "snapshot",
    "patch_environment",
    "clear_environment",
    "purge_accelerate_environment",
    "convert_dict_to_env_variables",
]

_TRUE = {"1", "y", "yes", "t", "true", "on"}
_FALSE = {"0", "n", "no", "f", "false", "off", ""}


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """Accelerate's ``str_to_bool``: 1/0 (or True/False with ``to_bool``) for yes/no strings."""
    low = value.strip().lower()
    if low in _TRUE:
        result = 1
    elif low in _FALSE:
        result = 0
    else:
        raise ConfigurationError(
            f"Invalid truth value {value!r}: use one of 1/0, true/false, yes/no, on/off."
        )
    return bool(result) if to_bool else result


@dataclass(frozen=True)
class EnvVar:
    """One environment variable of the contract.

    ``name`` is the canonical spelling; ``aliases`` are read when ``name`` is unset
    (Accelerate's ``ACCELERATE_*`` names, torchrun's, SLURM's, MPI's, ...).
    """

    name: str
    doc: str
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def raw(self) -> tuple[str, str] | None:
        """``(spelling found, value)`` of the first set spelling, or ``None``."""
        for key in self.names:
            value = os.environ.get(key)
            if value is not None:
                return key, value
        return None

    def get(self, default: str | None = None) -> str | None:
        found = self.raw()
        return default if found is None else found[1]

    def is_set(self) -> bool:
        return self.raw() is not None

    def get_bool(self, default: bool = False) -> bool:
        found = self.raw()
        if found is None:
            return default
        key, value = found
        try:
            return bool(str_to_bool(value))
        except ConfigurationError:
            raise ConfigurationError(
                f"Environment variable {key}={value!r} is not a boolean: set it to 1 or 0."
            ) from None

    def get_int(self, default: int | None = None) -> int | None:
        found = self.raw()
        if found is None or found[1].strip() == "":
            return default
        key, value = found
        try:
            return int(value)
        except ValueError:
            raise ConfigurationError(
                f"Environment variable {key}={value!r} is not an integer: set it to a whole number."
            ) from None

    def set(self, value: object, env: dict[str, str] | None = None) -> None:
        """Write the canonical name (into ``env`` when given, else ``os.environ``)."""
        (os.environ if env is None else env)[self.name] = str(value)


def _var(name: str, doc: str, *aliases: str) -> EnvVar:
    var = EnvVar(name, doc, aliases)
    ENV_VARS[name] = var
    return var


ENV_VARS: dict[str, EnvVar] = {}

# --- set by `accel launch`, read by the runtime --------------------------------------------
USE_CPU = _var("ACCEL_USE_CPU", "Force the CPU even when an accelerator is present (gloo "
               "backend for multi-process runs). Set by `accel launch --cpu`.",
               "ACCELERATE_USE_CPU")
MIXED_PRECISION = _var("ACCEL_MIXED_PRECISION", "Mixed precision mode: no, fp16, bf16 or fp8. "
                       "Set by `accel launch --mixed_precision`.", "ACCELERATE_MIXED_PRECISION")
DEBUG_MODE = _var("ACCEL_DEBUG_MODE", "Check tensor shapes across ranks before each collective "
                  "and raise DistributedOperationException on a mismatch.",
                  "ACCELERATE_DEBUG_MODE")
STRATEGY = _var("ACCEL_STRATEGY", "Name of a registered strategy (entry-point group "
                "accel.strategies) to use instead of choosing one from the configuration, "
                "e.g. a third-party engine. Unknown names list the registered ones.")
LAUNCHED = _var("ACCEL_LAUNCHED", "Set to 1 in every worker started by `accel launch`.")
LOG_LEVEL = _var("ACCEL_LOG_LEVEL", "Level of loggers made by accel_state.logging.get_logger "
                 "when none is given (DEBUG, INFO, WARNING, ...).", "ACCELERATE_LOG_LEVEL")
TORCH_DEVICE = _var("ACCEL_TORCH_DEVICE", "Device type to use instead of auto-detection "
                    "(e.g. cpu, cuda).", "ACCELERATE_TORCH_DEVICE")
PROCESS_GROUP_TIMEOUT = _var("ACCEL_PROCESS_GROUP_TIMEOUT", "Seconds before a collective gives "
                             "up; InitProcessGroupKwargs(timeout=...) overrides it.")

# --- the rendezvous variables of torchrun / torch.distributed.run -------------------------
RANK = _var("RANK", "Global rank of this process (torchrun).")
WORLD_SIZE = _var("WORLD_SIZE", "Total number of processes (torchrun).")
LOCAL_RANK = _var("LOCAL_RANK", "Rank of this process on its machine (torchrun).")
LOCAL_WORLD_SIZE = _var("LOCAL_WORLD_SIZE", "Number of processes on this machine (torchrun).")
NODE_RANK = _var("NODE_RANK", "Rank of this machine (torchrun's GROUP_RANK).", "GROUP_RANK")
MASTER_ADDR = _var("MASTER_ADDR", "Address of the rank-0 machine for the TCP rendezvous.")
MASTER_PORT = _var("MASTER_PORT", "Port of the rank-0 machine for the TCP rendezvous.")
OMP_NUM_THREADS = _var("OMP_NUM_THREADS", "Intra-op threads per process; the launcher sets it "
                       "to cores / processes when unset.")

# --- SLURM (srun with one task per process) -----------------------------------------------
SLURM_PROCID = _var("SLURM_PROCID", "SLURM global task id, used as the rank under srun.")
SLURM_NTASKS = _var("SLURM_NTASKS", "SLURM task count, used as the world size under srun.")
SLURM_LOCALID = _var("SLURM_LOCALID", "SLURM task id on the node, used as the local rank.")
SLURM_NTASKS_PER_NODE = _var("SLURM_NTASKS_PER_NODE", "SLURM tasks per node (local world size).")

# --- MPI launchers (mpirun / mpiexec of Open MPI, MPICH / Intel MPI, MVAPICH) -------------
MPI_RANK = _var("PMI_RANK", "MPI global rank.", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
MPI_SIZE = _var("PMI_SIZE", "MPI world size.", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
MPI_LOCAL_RANK = _var("MPI_LOCALRANKID", "MPI rank on this node.",
                      "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")
MPI_LOCAL_SIZE = _var("MPI_LOCALNRANKS", "MPI ranks on this node.",
                      "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


def read(name: str) -> str | None:
    """Value of a declared variable (or of one of its aliases), else ``None``."""
    try:
        return ENV_VARS[name].get()
    except KeyError:
        raise ConfigurationError(
            f"{name!r} is not part of accel's environment contract; declare it in accel_state.env."
        ) from None


def snapshot(prefixes: tuple[str, ...] = ("ACCEL", "ACCELERATE")) -> dict[str, str]:
    """Every set variable whose name starts with one of ``prefixes`` (for `accel env`)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


# --- Accelerate's public environment helpers (accelerate.utils.environment) --------------

def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Boolean value of the variable ``key`` (1/0, true/false, yes/no, on/off)."""
    return EnvVar(key, "").get_bool(default)


def parse_choice_from_env(key: str, default: str = "no") -> str:
    return os.environ.get(key, str(default))


def get_int_from_env(env_keys: list[str] | tuple[str, ...], default: int) -> int:
    """First non-negative integer among ``env_keys``, else ``default``."""
    for key in env_keys:
        value = EnvVar(key, "").get_int(-1)
        if value is not None and value >= 0:
            return value
    return default


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set upper-cased ``kwargs`` as environment variables inside the block, then restore."""
    saved: dict[str, str | None] = {}
    for key, value in kwargs.items():
        key = key.upper()
        saved[key] = os.environ.get(key)
        os.environ[key] = str(value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty ``os.environ``; restore everything afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_F = TypeVar("_F", bound=Callable[..., Any])


def purge_accelerate_environment(func_or_cls: _F) -> _F:
    """Decorator: drop ``ACCEL_*``/``ACCELERATE_*`` variables set while the function runs.

    On a class, every ``test*`` method plus ``setUp``/``tearDown`` is wrapped.
    """
    if isinstance(func_or_cls, type):
        for attr, value in list(vars(func_or_cls).items()):
            if callable(value) and (attr.startswith("test") or attr in ("setUp", "tearDown")):
                setattr(func_or_cls, attr, purge_accelerate_environment(value))
        return func_or_cls

    @functools.wraps(func_or_cls)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = snapshot()
        try:
            return func_or_cls(*args, **kwargs)
        finally:
            for key in snapshot():
                if key not in before:
                    del os.environ[key]
                else:
                    os.environ[key] = before[key]

    return wrapper  # type: ignore[return-value]


def convert_dict_to_env_variables(current_env: Mapping[str, Any]) -> list[str]:
    """``KEY=value\\n`` lines for an env file; keys or values with spaces/semicolons are skipped."""
    lines = []
    for key, value in current_env.items():
        value = str(value)
        if any(c in key + value for c in (" ", ";", "\n")) or not key:
            continue
        lines.append(f"{key}={value}\n")
    return lines


# --- accel-launch: variables `accel launch` reads in the launcher process ------------------
ELASTIC_SHUTDOWN_TIMEOUT = _var(
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
    "Seconds torch's elastic agent gives the workers between the stop signal and SIGKILL "
    "when `accel launch` is interrupted or ends. `accel launch` uses 5 s unless this is set. "
    "(After a worker failure torch itself always allows 30 s, which matters only for "
    "workers that ignore SIGTERM.)")

# --- accel_state.random: variables set for deterministic runs ------------------------------
CUBLAS_WORKSPACE_CONFIG = _var("CUBLAS_WORKSPACE_CONFIG", "cuBLAS workspace setting; "
                               "set_seed(deterministic=True) sets it to ':4096:8' when unset, "
                               "since deterministic CUDA matmuls require it.")

# --- accel-tracking: failure policy and MLflow's run settings (read by MLflowTracker) -----
TRACKING_STRICT = _var(
    "ACCEL_TRACKING_STRICT",
    "Make a tracker that fails (start, log or finish raises: network down, bad credentials) "
    "an error. By default such a tracker warns once and training continues without failing.")
MLFLOW_EXPERIMENT_NAME = _var("MLFLOW_EXPERIMENT_NAME", "MLflow experiment to log into; "
                              "takes precedence over the project name given to init_trackers.")
MLFLOW_RUN_ID = _var("MLFLOW_RUN_ID", "Resume this existing MLflow run instead of a new one.")
MLFLOW_TAGS = _var("MLFLOW_TAGS", "JSON object of tags for the MLflow experiment and run.")
MLFLOW_NESTED_RUN = _var("MLFLOW_NESTED_RUN", "1 to start the MLflow run nested in the "
                         "active one.")
MLFLOW_RUN_NAME = _var("MLFLOW_RUN_NAME", "Name of the MLflow run.")

# --- accel-checkpoint: multi-process saves, and a test-only hook for crash tests -----------
CHECKPOINT_PEER_TIMEOUT = _var(
    "ACCEL_CHECKPOINT_PEER_TIMEOUT",
    "Seconds rank 0 waits for the other ranks to enter a checkpoint save (default 60). If "
    "they do not come (save_state called on the main process only), rank 0 commits the "
    "checkpoint alone, without their RNG states, instead of hanging.")
CHECKPOINT_VERIFY = _var(
    "ACCEL_CHECKPOINT_VERIFY",
    "How Accelerator.load_state checks a checkpoint's bytes when verify= is not given: "
    "'full' (default: every byte before anything is loaded) or 'background' (load at once, "
    "check while training starts; the first optimizer step waits for the check).")
CHECKPOINT_TRUST_PICKLES = _var(
    "ACCEL_CHECKPOINT_TRUST_PICKLES",
    "1 to load checkpoints whose layout's writer reads its files with a full unpickler "
    "(RankCheckpointWriter.unpickles == 'arbitrary', e.g. an engine's .pt files), as "
    "load_state(trust_pickles=True) does. Unpickling can run code: set it only for "
    "checkpoints you trust. The files are still verified against the manifest first.")
CHECKPOINT_TEST_DELAY = _var(
    "ACCEL_CHECKPOINT_TEST_DELAY",
    "Test only: seconds a checkpoint save sleeps after each file and before its rename, so "
    "crash tests can kill the process at a chosen point. Never set it in real runs.")

# --- accel-precision: fp8 backend choice -------------------------------------------------
FP8_BACKEND = _var(
    "ACCEL_FP8_BACKEND",
    "Backend of mixed_precision='fp8' when no recipe handler names one: 'te' (Transformer "
    "Engine, CUDA only) or 'ao' (torchao). Unset: Transformer Engine on a CUDA machine that "
    "has it, else torchao.", "ACCELERATE_FP8_BACKEND")

# --- FSDP (Accelerate's FSDP_* names) ------------------------------------------------------
# Read by accel_parallel.FullyShardedDataParallelPlugin for fields left as None; an explicit
# argument always wins. `accel launch` (and Accelerate's launcher) write the FSDP_* names.
USE_FSDP = _var("ACCEL_USE_FSDP", "1 to train with FSDP2 (fully_shard). Set by `accel launch "
                "--use_fsdp`.", "ACCELERATE_USE_FSDP")
FSDP_VERSION = _var("ACCEL_FSDP_VERSION", "1 or 2 (default 2). Both run as FSDP2; 1 is "
                    "accepted for Accelerate configs and converted.", "FSDP_VERSION")
FSDP_SHARDING_STRATEGY = _var(
    "ACCEL_FSDP_SHARDING_STRATEGY", "FSDP1-style strategy: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
    "HYBRID_SHARD, HYBRID_SHARD_ZERO2 or 1..5 (default FULL_SHARD).", "FSDP_SHARDING_STRATEGY")
FSDP_RESHARD_AFTER_FORWARD = _var(
    "ACCEL_FSDP_RESHARD_AFTER_FORWARD", "true/false (FSDP2), or a sharding-strategy name "
    "as FSDP1 configs write it. Free parameters after forward (default true).",
    "FSDP_RESHARD_AFTER_FORWARD")
FSDP_AUTO_WRAP_POLICY = _var(
    "ACCEL_FSDP_AUTO_WRAP_POLICY", "Which submodules get their own fully_shard: "
    "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP (default).", "FSDP_AUTO_WRAP_POLICY")
FSDP_TRANSFORMER_CLS_TO_WRAP = _var(
    "ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP", "Comma-separated class names sharded on their own "
    "under TRANSFORMER_BASED_WRAP (default: the model's _no_split_modules).",
    "FSDP_TRANSFORMER_CLS_TO_WRAP")
FSDP_MIN_NUM_PARAMS = _var(
    "ACCEL_FSDP_MIN_NUM_PARAMS", "Parameter count at which SIZE_BASED_WRAP shards a submodule "
    "on its own (default 100000000).", "FSDP_MIN_NUM_PARAMS")
FSDP_OFFLOAD_PARAMS = _var("ACCEL_FSDP_OFFLOAD_PARAMS", "1 to keep sharded parameters, gradients "
                           "and optimizer states in CPU memory (needs an accelerator).",
                           "FSDP_OFFLOAD_PARAMS")
FSDP_STATE_DICT_TYPE = _var(
    "ACCEL_FSDP_STATE_DICT_TYPE", "Checkpoint form of FSDP models: SHARDED_STATE_DICT "
    "(default) or FULL_STATE_DICT.", "FSDP_STATE_DICT_TYPE")
FSDP_ACTIVATION_CHECKPOINTING = _var(
    "ACCEL_FSDP_ACTIVATION_CHECKPOINTING", "1 to recompute the activations of each sharded "
    "submodule in backward.", "FSDP_ACTIVATION_CHECKPOINTING")
FSDP_CPU_RAM_EFFICIENT_LOADING = _var(
    "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING", "1 to load pretrained weights on rank 0 only and "
    "broadcast them (implies FSDP_SYNC_MODULE_STATES).", "FSDP_CPU_RAM_EFFICIENT_LOADING")
FSDP_SYNC_MODULE_STATES = _var(
    "ACCEL_FSDP_SYNC_MODULE_STATES", "1 (default) to broadcast rank 0's parameters and buffers "
    "to every rank when the model is sharded.", "FSDP_SYNC_MODULE_STATES")
FSDP_USE_ORIG_PARAMS = _var(
    "ACCEL_FSDP_USE_ORIG_PARAMS", "FSDP1 option; FSDP2 always keeps the original parameters, "
    "so only true (default) is accepted.", "FSDP_USE_ORIG_PARAMS")
FSDP_FORWARD_PREFETCH = _var(
    "ACCEL_FSDP_FORWARD_PREFETCH", "FSDP1 option with no FSDP2 equivalent; only false "
    "(default) is accepted.", "FSDP_FORWARD_PREFETCH")
FSDP_BACKWARD_PREFETCH = _var(
    "ACCEL_FSDP_BACKWARD_PREFETCH", "FSDP1 option: BACKWARD_PRE (what FSDP2 does) or "
    "NO_PREFETCH; BACKWARD_POST has no FSDP2 equivalent.", "FSDP_BACKWARD_PREFETCH")
