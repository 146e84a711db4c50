"""Variables of `accel launch` / `accel config` that no runtime reader declared elsewhere:
the config file's location, launcher switches Accelerate writes (CPU affinity, bf16
downcast, fp8 recipe), torch elastic's own variables and the cluster managers' ones the
launcher reads (SLURM, the debug launcher's rendezvous file)."""

from __future__ import annotations

from accel_state.env._core import _var

# --- where `accel config` writes and `accel launch` reads the config file ----------------
CONFIG_FILE = _var("ACCEL_CONFIG_FILE", "Path of the default config file of `accel config` / "
                   "`accel launch` (else $HF_HOME/accelerate/default_config.yaml).",
                   "ACCELERATE_CONFIG_FILE")
HF_HOME = _var("HF_HOME", "Hugging Face cache root; the default config file lives in "
               "$HF_HOME/accelerate/ (default ~/.cache/huggingface).")
XDG_CACHE_HOME = _var("XDG_CACHE_HOME", "User cache root; without HF_HOME the config file "
                      "lives in $XDG_CACHE_HOME/huggingface/accelerate/.")

# --- launcher switches Accelerate's launcher writes -----------------------------------------
CPU_AFFINITY = _var("ACCEL_CPU_AFFINITY", "1 to pin each worker to the CPU cores nearest its "
                    "GPU (`accel launch --enable_cpu_affinity`).", "ACCELERATE_CPU_AFFINITY")
DOWNCAST_BF16 = _var("ACCEL_DOWNCAST_BF16", "1 to store fp32 tensors as bf16 on XLA devices "
                     "(`--downcast_bf16`); accepted and passed on, it has no effect off XLA.",
                     "ACCELERATE_DOWNCAST_BF16")
CONFIG_DS_FIELDS = _var("ACCEL_CONFIG_DS_FIELDS", "Comma-separated DeepSpeed fields the launch "
                        "configuration set, written for Accelerate's readers; accel's "
                        "DeepSpeedPlugin finds a conflict with a DeepSpeed JSON from the "
                        "ACCELERATE_DEEPSPEED_* variables themselves.",
                        "ACCELERATE_CONFIG_DS_FIELDS")
FSDP_IGNORED_MODULES = _var("ACCEL_FSDP_IGNORED_MODULES", "Regular expression of module names "
                            "FSDP leaves unsharded (config key fsdp_ignored_modules).",
                            "FSDP_IGNORED_MODULES")
VISIBLE_DEVICES = _var("CUDA_VISIBLE_DEVICES", "CUDA devices the workers see; "
                       "`accel launch --gpu_ids 0,1` sets it.")

# --- fp8 recipe (Accelerate's ACCELERATE_FP8_* names), written by `accel launch --fp8_*` -----
FP8_USE_AUTOCAST_DURING_EVAL = _var(
    "ACCEL_FP8_USE_AUTOCAST_DURING_EVAL", "1 to keep fp8 autocast in evaluation too.",
    "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL")
FP8_MARGIN = _var("ACCEL_FP8_MARGIN", "Transformer Engine scaling-factor margin (int).",
                  "ACCELERATE_FP8_MARGIN")
FP8_INTERVAL = _var("ACCEL_FP8_INTERVAL", "Steps between fp8 scaling-factor updates (int).",
                    "ACCELERATE_FP8_INTERVAL")
FP8_FORMAT = _var("ACCEL_FP8_FORMAT", "fp8 format: HYBRID (E4M3 forward, E5M2 backward) or E4M3.",
                  "ACCELERATE_FP8_FORMAT")
FP8_AMAX_HISTORY_LEN = _var("ACCEL_FP8_AMAX_HISTORY_LEN", "Length of the amax history window.",
                            "ACCELERATE_FP8_AMAX_HISTORY_LEN")
FP8_AMAX_COMPUTE_ALGO = _var("ACCEL_FP8_AMAX_COMPUTE_ALGO", "Amax reduction: max or "
                             "most_recent.", "ACCELERATE_FP8_AMAX_COMPUTE_ALGO")
FP8_OVERRIDE_FPROP = _var("ACCEL_FP8_OVERRIDE_FPROP", "1 to run the forward GEMM in higher "
                          "precision.", "ACCELERATE_FP8_OVERRIDE_FPROP")
FP8_OVERRIDE_DGRAD = _var("ACCEL_FP8_OVERRIDE_DGRAD", "1 to run the data-gradient GEMM in higher "
                          "precision.", "ACCELERATE_FP8_OVERRIDE_DGRAD")
FP8_OVERRIDE_WGRAD = _var("ACCEL_FP8_OVERRIDE_WGRAD", "1 to run the weight-gradient GEMM in "
                          "higher precision.", "ACCELERATE_FP8_OVERRIDE_WGRAD")
FP8_OPT_LEVEL = _var("ACCEL_FP8_OPT_LEVEL", "MS-AMP optimisation level O1 or O2.",
                     "ACCELERATE_FP8_OPT_LEVEL")
FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER = _var(
    "ACCEL_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "1 to all-gather FSDP2 parameters in float8 "
    "(torchao).", "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER")
FP8_PAD_INNER_DIM = _var("ACCEL_FP8_PAD_INNER_DIM", "1 to pad inner dimensions to multiples of "
                         "16 for float8 matmuls (torchao).", "ACCELERATE_FP8_PAD_INNER_DIM")

# --- torch elastic: set by the agent / read by it in the launcher process -----------------
TORCHELASTIC_RESTART_COUNT = _var(
    "TORCHELASTIC_RESTART_COUNT", "How many times torch's elastic agent has restarted the "
    "worker group (0 on the first attempt); set in every worker.")
DISABLE_SHARE_RDZV_TCP_STORE = _var(
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1 makes the workers create their own TCPStore at a "
    "fresh MASTER_PORT every attempt instead of reusing the rendezvous store. `accel launch "
    "--max_restarts N` sets it: with the shared store, restarted gloo workers read the "
    "previous attempt's addresses and fail to connect.")

# --- the hang watchdog of `accel launch` (accel_state.progress, accel_launch.watchdog) ------
STALL_TIMEOUT = _var(
    "ACCEL_STALL_TIMEOUT", "Seconds with no step on any rank of this machine after which "
    "`accel launch` dumps every rank's Python stack, names the rank that stopped first and "
    "ends the job (exit code 124); `off` disables it. The clock starts at the first step (a "
    "call of Accelerator.backward). Read by the launcher when --stall_timeout is not given; "
    "default 1800. Multi-process launches only.")
WATCHDOG_DIR = _var(
    "ACCEL_WATCHDOG_DIR", "Folder where each worker of a multi-process `accel launch` keeps its "
    "step counter (rank-N.progress, bumped in memory by Accelerator.backward) and where it "
    "writes its Python stack on SIGUSR1 (rank-N.stack). Set by the launcher for the workers; "
    "a process without it reports nothing.")
LAUNCH_ID = _var(
    "ACCEL_LAUNCH_ID", "Token of one `accel launch` run, set in every worker it starts (and "
    "inherited by their children): if the launcher dies without stopping them (SIGKILL), "
    "its guard process ends every process that carries the token.")

# --- the debug / notebook launchers -------------------------------------------------------
DEBUG_RDV_FILE = _var("ACCEL_DEBUG_RDV_FILE", "File of the FileStore rendezvous of "
                      "debug_launcher's processes.", "ACCELERATE_DEBUG_RDV_FILE")
FORK_LAUNCHED = _var("FORK_LAUNCHED", "1 in processes forked by notebook_launcher / "
                     "debug_launcher.")

# --- SLURM: one `accel launch` per node under srun ----------------------------------------
SLURM_NNODES = _var("SLURM_NNODES", "Nodes of the SLURM job step (`accel launch` under srun "
                    "uses it as --num_machines).", "SLURM_JOB_NUM_NODES")
SLURM_NODEID = _var("SLURM_NODEID", "This node's index in the SLURM job (--machine_rank).")
SLURM_NODELIST = _var("SLURM_STEP_NODELIST", "Nodes of the SLURM job step; the first one is "
                      "the rendezvous host (--main_process_ip).", "SLURM_JOB_NODELIST",
                      "SLURM_NODELIST")
SLURM_JOB_ID = _var("SLURM_JOB_ID", "SLURM job id; the launcher's rendezvous id under srun, "
                    "and its default port (15000 + id % 10000) when MASTER_PORT is not set.")

__all__ = [name for name in dict(globals()) if name.isupper()]
