"""Variables read by accel-parallel's plugins (Accelerate's FSDP_* names, ...)."""

from __future__ import annotations

from accel_state.env._core import _var

# --- FSDP (Accelerate's FSDP_* names) ------------------------------------------------------
# Read by accel_parallel.FullyShardedDataParallelPlugin for fields left as None; an explicit
# argument always wins. `accel launch` (and Accelerate's launcher) write the FSDP_* names.
USE_FSDP = _var("ACCEL_USE_FSDP", "1 to train with FSDP2 (fully_shard). Set by `accel launch "
                "--use_fsdp`.", "ACCELERATE_USE_FSDP")
USE_MEGATRON_LM = _var("ACCEL_USE_MEGATRON_LM", "Accelerate's switch for its Megatron-LM plugin: "
                      "refused when true (accel runs tensor and pipeline parallelism with "
                      "torch's own: ParallelismConfig).", "ACCELERATE_USE_MEGATRON_LM")
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

# --- ParallelismConfig (Accelerate's PARALLELISM_CONFIG_* names) ---------------------------
# Read by accel_parallel.ParallelismConfig for fields left as None; an explicit argument wins.
# Accelerate's launcher writes ACCELERATE_USE_PARALLELISM_CONFIG and these from its config file.
USE_PARALLELISM_CONFIG = _var(
    "ACCEL_USE_PARALLELISM_CONFIG", "1 to build a ParallelismConfig from the PARALLELISM_CONFIG_* "
    "variables when the Accelerator is given none.", "ACCELERATE_USE_PARALLELISM_CONFIG")
PARALLELISM_CONFIG_DP_REPLICATE_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "Data-parallel replicas (DDP, or the replicate "
    "dimension of HSDP); default 1.", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE")
PARALLELISM_CONFIG_DP_SHARD_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE", "Processes FSDP2 shards each replica over; "
    "default 1.", "PARALLELISM_CONFIG_DP_SHARD_SIZE")
PARALLELISM_CONFIG_TP_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_TP_SIZE", "Tensor-parallel degree (parallelize_module over the "
    "'tp' mesh dimension); default 1.", "PARALLELISM_CONFIG_TP_SIZE")
PARALLELISM_CONFIG_CP_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_CP_SIZE", "Context-parallel degree (sequence split for SDPA "
    "attention; needs CUDA); default 1.", "PARALLELISM_CONFIG_CP_SIZE")
PARALLELISM_CONFIG_CP_BACKEND = _var(
    "ACCEL_PARALLELISM_CONFIG_CP_BACKEND", "Context-parallel implementation: torch (default, "
    "the only one).", "PARALLELISM_CONFIG_CP_BACKEND")
PARALLELISM_CONFIG_CP_COMM_STRATEGY = _var(
    "ACCEL_PARALLELISM_CONFIG_CP_COMM_STRATEGY", "How context-parallel attention exchanges keys "
    "and values: allgather (default) or alltoall.", "PARALLELISM_CONFIG_CP_COMM_STRATEGY")
PARALLELISM_CONFIG_PP_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_PP_SIZE", "Pipeline-parallel degree: stages over the outermost 'pp' "
    "mesh dimension (torch.distributed.pipelining); default 1.", "PARALLELISM_CONFIG_PP_SIZE")
PARALLELISM_CONFIG_PP_SCHEDULE = _var(
    "ACCEL_PARALLELISM_CONFIG_PP_SCHEDULE", "Pipeline schedule: gpipe, 1f1b (default) or "
    "interleaved_1f1b.", "PARALLELISM_CONFIG_PP_SCHEDULE")
PARALLELISM_CONFIG_PP_NUM_MICROBATCHES = _var(
    "ACCEL_PARALLELISM_CONFIG_PP_NUM_MICROBATCHES", "Micro-batches each batch is cut into for "
    "the pipeline; default one per stage.", "PARALLELISM_CONFIG_PP_NUM_MICROBATCHES")
PARALLELISM_CONFIG_PP_STAGES_PER_RANK = _var(
    "ACCEL_PARALLELISM_CONFIG_PP_STAGES_PER_RANK", "Pipeline stages each rank holds (interleaved "
    "1F1B; default 2 there, else 1).", "PARALLELISM_CONFIG_PP_STAGES_PER_RANK")
PARALLELISM_CONFIG_SP_SIZE = _var(
    "ACCEL_PARALLELISM_CONFIG_SP_SIZE", "Ulysses sequence-parallel degree (Accelerate's sp_size); "
    "default 1. Each sequence is split over that many processes (accel_parallel.mesh.ulysses).",
    "PARALLELISM_CONFIG_SP_SIZE")
PARALLELISM_CONFIG_SP_BACKEND = _var(
    "ACCEL_PARALLELISM_CONFIG_SP_BACKEND", "Ulysses sequence-parallel backend: deepspeed "
    "(default), torch or accelerate; all run accel's torch-native Ulysses.",
    "PARALLELISM_CONFIG_SP_BACKEND")
# Read by accel_parallel.DeepSpeedSequenceParallelConfig for fields left as None.
PARALLELISM_CONFIG_SP_SEQ_LENGTH = _var(
    "ACCEL_PARALLELISM_CONFIG_SP_SEQ_LENGTH", "Ulysses sequence length (a multiple of sp_size); "
    "needed when the length is fixed.", "PARALLELISM_CONFIG_SP_SEQ_LENGTH")
PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE = _var(
    "ACCEL_PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true (default): Ulysses takes each "
    "batch's sequence length; false: every batch has sp_seq_length.",
    "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE")
PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION = _var(
    "ACCEL_PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "Attention under Ulysses: sdpa, "
    "flash_attention_2, flash_attention_3 or a hub flash-attn kernel ('org/flash-attn...').",
    "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION")

__all__ = [name for name in dict(globals()) if name.isupper()]
