"""Variables of the process topology: set by `accel launch`, torchrun, SLURM or MPI, read by
the runtime; and the launcher's own."""

from __future__ import annotations

from accel_state.env._core import _var

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
                "e.g. a third-party engine, or a preset (zero2, ...). Unknown names list the "
                "registered ones. Set by `accel launch --strategy` / a config file's strategy:.")
STRATEGY_CONFIG = _var("ACCEL_STRATEGY_CONFIG", "JSON object of options for the strategy "
                       "ACCEL_STRATEGY names, e.g. {\"level\": 2}: built into the kwargs "
                       "handler the strategy takes (Strategy.handler_kinds) when the script "
                       "passed none of that kind (a handler in code wins). Set by `accel launch "
                       "--strategy_config` / a config file's strategy_config:.")
LAUNCHED = _var("ACCEL_LAUNCHED", "Set to 1 in every worker started by `accel launch`.")
LOG_LEVEL = _var("ACCEL_LOG_LEVEL", "Level of loggers made by accel_state.logging.get_logger "
                 "when none is given (DEBUG, INFO, WARNING, ...).", "ACCELERATE_LOG_LEVEL")
TORCH_DEVICE = _var("ACCEL_TORCH_DEVICE", "Device to use instead of auto-detection (e.g. cpu, "
                    "cuda, cuda:1: the index is kept).", "ACCELERATE_TORCH_DEVICE")
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


# --- accel-launch: variables `accel launch` reads in the launcher process ------------------
ELASTIC_SHUTDOWN_TIMEOUT = _var(
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
    "Seconds torch's elastic agent gives the workers between the stop signal and SIGKILL "
    "when `accel launch` is interrupted or ends. `accel launch` uses 30 s unless this is set. "
    "(After a worker failure torch itself always allows 30 s, which matters only for "
    "workers that ignore SIGTERM.)")

# --- accel_state.random: variables set for deterministic runs ------------------------------
CUBLAS_WORKSPACE_CONFIG = _var("CUBLAS_WORKSPACE_CONFIG", "cuBLAS workspace setting; "
                               "set_seed(deterministic=True) sets it to ':4096:8' when unset, "
                               "since deterministic CUDA matmuls require it.")

__all__ = [name for name in dict(globals()) if name.isupper()]
