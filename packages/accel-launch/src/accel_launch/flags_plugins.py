"""`accel launch` flags of the training paradigms: dynamo, DeepSpeed, FSDP, ParallelismConfig,
fp8 — and the Megatron-LM, TPU, SageMaker and IPEX/XPU flags accel refuses with a clear
message."""

from __future__ import annotations

from accel_launch.flag_spec import Flag, Group

__all__ = ["DYNAMO_BACKENDS", "PLUGIN_GROUPS"]

_MEGATRON = ("Megatron-LM's role is played by torch-native parallelism in accel: use "
             "--use_parallelism_config --parallelism_config_tp_size N (tensor and sequence "
             "parallel) and --parallelism_config_pp_size N for pipeline stages "
             "(docs/parallel.md).")
_TPU = "TPU (torch_xla) training is not supported by accel; run on CPU or CUDA devices."
_IPEX = ("Intel Extension for PyTorch (IPEX) and Intel XPU devices are not supported by accel "
         "(older Accelerate flags): drop the flag; accel runs on CPU (plain torch) or CUDA "
         "devices.")
_SAGEMAKER = "Amazon SageMaker launches are not supported by accel; run `accel launch` on the " \
             "instances themselves."

_PARADIGM = Group("training paradigm", "Which distributed engine the workers use.", (
    Flag(("--use_deepspeed",), "Train with DeepSpeed ZeRO (ACCELERATE_USE_DEEPSPEED).", "switch",
         default=False, env="ACCELERATE_USE_DEEPSPEED"),
    Flag(("--use_fsdp",), "Train with FSDP2 (ACCELERATE_USE_FSDP).", "switch", default=False,
         env="ACCELERATE_USE_FSDP"),
    Flag(("--use_parallelism_config",), "Build a ParallelismConfig from the "
         "--parallelism_config_* flags (ACCELERATE_USE_PARALLELISM_CONFIG).", "switch",
         default=False, env="ACCELERATE_USE_PARALLELISM_CONFIG"),
    Flag(("--use_megatron_lm",), "Megatron-LM: refused.", "switch", unsupported=_MEGATRON),
    Flag(("--tpu",), "TPU: refused.", "switch", unsupported=_TPU),
))

_DY = "dynamo_config"
#: Accelerate's torch.compile backend names, as accel_parallel.DynamoBackend has them (a test
#: keeps the two equal): a misspelt backend is refused before any worker starts.
DYNAMO_BACKENDS = ("no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser", "nvprims_nvfuser",
                   "cudagraphs", "ofi", "fx2trt", "onnxrt", "tensorrt",
                   "aot_torchxla_trace_once", "torchxla_trace_once", "ipex", "tvm",
                   "hpu_backend")
_DYNAMO = Group("torch.compile (dynamo)", "Compile prepared models.", (
    Flag(("--dynamo_backend",), "torch.compile backend, any case: " + ", ".join(
         DYNAMO_BACKENDS) + " (ACCELERATE_DYNAMO_BACKEND).", "choice", DYNAMO_BACKENDS,
         config=(_DY, "dynamo_backend"), env="ACCELERATE_DYNAMO_BACKEND", metavar="BACKEND"),
    Flag(("--dynamo_mode",), "torch.compile mode (ACCELERATE_DYNAMO_MODE).", "choice",
         ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
         config=(_DY, "dynamo_mode"), env="ACCELERATE_DYNAMO_MODE"),
    Flag(("--dynamo_use_fullgraph",), "Require one graph per module.", "switch",
         config=(_DY, "dynamo_use_fullgraph"), env="ACCELERATE_DYNAMO_USE_FULLGRAPH"),
    Flag(("--dynamo_use_dynamic",), "Trace with dynamic shapes.", "switch",
         config=(_DY, "dynamo_use_dynamic"), env="ACCELERATE_DYNAMO_USE_DYNAMIC"),
    Flag(("--dynamo_use_regional_compilation",), "Compile each repeated block once.", "switch",
         config=(_DY, "dynamo_use_regional_compilation"),
         env="ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"),
))


def _ds(opt: str, help: str, kind: str = "str", env: str | None = None, **kw: object) -> Flag:
    return Flag((opt,), help, kind, config=("deepspeed_config", opt[2:]), env=env, **kw)  # type: ignore[arg-type]


_DEEPSPEED = Group("DeepSpeed", "Used with --use_deepspeed (or distributed_type: DEEPSPEED).", (
    _ds("--deepspeed_config_file", "DeepSpeed JSON config file.",
        env="ACCELERATE_DEEPSPEED_CONFIG_FILE", metavar="PATH"),
    _ds("--zero_stage", "ZeRO stage 0-3 (default 2).", "int",
        env="ACCELERATE_DEEPSPEED_ZERO_STAGE", metavar="STAGE"),
    _ds("--offload_optimizer_device", "Where optimizer states live: none, cpu or nvme.",
        "choice", env="ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
        choices=("none", "cpu", "nvme")),
    _ds("--offload_param_device", "Where parameters live: none, cpu or nvme.", "choice",
        env="ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", choices=("none", "cpu", "nvme")),
    _ds("--offload_optimizer_nvme_path", "NVMe path for optimizer offload.",
        env="ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", metavar="PATH"),
    _ds("--offload_param_nvme_path", "NVMe path for parameter offload.",
        env="ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", metavar="PATH"),
    _ds("--gradient_accumulation_steps", "Gradient accumulation steps (default 1).", "int",
        env="ACCELERATE_GRADIENT_ACCUMULATION_STEPS", metavar="N"),
    _ds("--gradient_clipping", "Gradient clipping norm (default 1.0).", "float",
        env="ACCELERATE_GRADIENT_CLIPPING", metavar="NORM"),
    _ds("--zero3_init_flag", "Build models sharded with deepspeed.zero.Init (ZeRO-3).", "bool",
        env="ACCELERATE_DEEPSPEED_ZERO3_INIT"),
    _ds("--zero3_save_16bit_model", "Save 16-bit weights with ZeRO-3.", "bool",
        env="ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"),
    _ds("--deepspeed_moe_layer_cls_names", "Comma-separated MoE layer classes, e.g. "
        "MixtralSparseMoeBlock.", env="ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
        metavar="NAMES"),
    _ds("--deepspeed_hostfile", "DeepSpeed's pdsh hostfile: refused (run `accel launch` on "
        "every machine instead).", metavar="PATH"),
    _ds("--deepspeed_exclusion_filter", "DeepSpeed's hostfile filter: refused with it.",
        metavar="FILTER"),
    _ds("--deepspeed_inclusion_filter", "DeepSpeed's hostfile filter: refused with it.",
        metavar="FILTER"),
    _ds("--deepspeed_multinode_launcher", "Only 'standard' (accel's own launcher on every "
        "machine); pdsh, openmpi, mvapich, ... are refused.", metavar="NAME"),
))


def _fsdp(opt: str, help: str, kind: str = "str", env: str | None = None, **kw: object) -> Flag:
    return Flag((opt,), help, kind, config=("fsdp_config", opt[2:]), env=env, **kw)  # type: ignore[arg-type]


_FSDP = Group("FSDP", "Used with --use_fsdp (or distributed_type: FSDP). FSDP means FSDP2.", (
    _fsdp("--fsdp_version", "1 or 2 (default 2; 1 runs as FSDP2 with the equivalent settings).",
          "int", env="FSDP_VERSION"),
    _fsdp("--fsdp_sharding_strategy", "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, ...",
          env="FSDP_SHARDING_STRATEGY", metavar="STRATEGY"),
    _fsdp("--fsdp_reshard_after_forward", "Free gathered parameters after forward (FSDP2; "
          "true/false or a sharding strategy name for FSDP1).", env="FSDP_RESHARD_AFTER_FORWARD",
          metavar="VALUE"),
    _fsdp("--fsdp_offload_params", "Offload parameters and gradients to the CPU.", "bool",
          env="FSDP_OFFLOAD_PARAMS"),
    _fsdp("--fsdp_min_num_params", "Minimum parameters of a wrapped module (SIZE_BASED_WRAP).",
          "int", env="FSDP_MIN_NUM_PARAMS", metavar="N"),
    _fsdp("--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP.",
          env="FSDP_AUTO_WRAP_POLICY", metavar="POLICY"),
    _fsdp("--fsdp_transformer_layer_cls_to_wrap", "Comma-separated layer classes to shard "
          "separately, e.g. BertLayer.", env="FSDP_TRANSFORMER_CLS_TO_WRAP", metavar="NAMES"),
    Flag(("--fsdp_backward_prefetch", "--fsdp_backward_prefetch_policy"), "BACKWARD_PRE, "
         "BACKWARD_POST or NO_PREFETCH (--fsdp_backward_prefetch_policy: its name before "
         "Accelerate 0.27).", config=("fsdp_config", "fsdp_backward_prefetch"),
         env="FSDP_BACKWARD_PREFETCH", metavar="POLICY"),
    _fsdp("--fsdp_state_dict_type", "FULL_STATE_DICT or SHARDED_STATE_DICT.",
          env="FSDP_STATE_DICT_TYPE", metavar="TYPE"),
    _fsdp("--fsdp_forward_prefetch", "Prefetch the next all-gather in forward.", "bool",
          env="FSDP_FORWARD_PREFETCH"),
    _fsdp("--fsdp_use_orig_params", "FSDP1 option kept for old configs.", "bool",
          env="FSDP_USE_ORIG_PARAMS"),
    _fsdp("--fsdp_cpu_ram_efficient_loading", "Load weights on rank 0 only, then broadcast.",
          "bool", env="FSDP_CPU_RAM_EFFICIENT_LOADING"),
    _fsdp("--fsdp_sync_module_states", "Broadcast rank 0's weights at wrap time.", "bool",
          env="FSDP_SYNC_MODULE_STATES", parser_default=True),
    _fsdp("--fsdp_activation_checkpointing", "Checkpoint activations of wrapped layers.",
          "bool", env="FSDP_ACTIVATION_CHECKPOINTING"),
    _fsdp("--fsdp_ignored_modules", "Regular expression of modules left unsharded.",
          env="FSDP_IGNORED_MODULES", metavar="REGEX"),
))


def _pc(name: str, help: str, kind: str = "int") -> Flag:
    opt = f"--parallelism_config_{name}"
    return Flag((opt,), help, kind, config=("parallelism_config", opt[2:]),
                env=f"PARALLELISM_CONFIG_{name.upper()}",
                metavar="N" if kind == "int" else None)


_PARALLELISM = Group("ParallelismConfig", "Used with --use_parallelism_config: one device "
                     "mesh for DDP/FSDP2/TP/CP.", (
    _pc("dp_replicate_size", "Data-parallel replicas."),
    _pc("dp_shard_size", "Processes FSDP2 shards each replica over."),
    _pc("tp_size", "Tensor-parallel degree."),
    _pc("cp_size", "Context-parallel degree."),
    _pc("cp_backend", "Context-parallel implementation (torch).", "str"),
    _pc("cp_comm_strategy", "allgather or alltoall.", "str"),
    _pc("pp_size", "Pipeline-parallel degree (stages over the outermost mesh dimension)."),
    _pc("pp_schedule", "Pipeline schedule: gpipe, 1f1b or interleaved_1f1b.", "str"),
    _pc("pp_num_microbatches", "Micro-batches per batch in the pipeline."),
    _pc("pp_stages_per_rank", "Pipeline stages per rank (interleaved 1F1B)."),
    _pc("sp_size", "Ulysses sequence-parallel degree (torch-native in accel)."),
    _pc("sp_backend", "Ulysses backend: deepspeed, torch or accelerate (one engine).", "str"),
    _pc("sp_seq_length", "Sequence length of Ulysses SP."),
    _pc("sp_seq_length_is_variable", "Variable sequence length for Ulysses SP.", "bool"),
    _pc("sp_attn_implementation", "Attention implementation for Ulysses SP.", "str"),
))


def _fp8(opt: str, key: str, help: str, kind: str = "str", env: str | None = None,
         **kw: object) -> Flag:
    return Flag((opt,), help, kind, config=("fp8_config", key), env=env, **kw)  # type: ignore[arg-type]


_FP8 = Group("fp8", "Used with --mixed_precision fp8.", (
    _fp8("--fp8_backend", "backend", "te (Transformer Engine), ao (torchao) or msamp.", "choice",
         env="ACCELERATE_FP8_BACKEND", choices=("te", "ao", "msamp", "TE", "AO", "MSAMP")),
    _fp8("--fp8_use_autocast_during_eval", "use_autocast_during_eval", "Keep fp8 in eval.",
         "switch", env="ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"),
    _fp8("--fp8_margin", "margin", "Scaling-factor margin (te).", "int",
         env="ACCELERATE_FP8_MARGIN"),
    _fp8("--fp8_interval", "interval", "Steps between scaling updates (te).", "int",
         env="ACCELERATE_FP8_INTERVAL"),
    _fp8("--fp8_format", "fp8_format", "HYBRID or E4M3 (te).", "choice",
         env="ACCELERATE_FP8_FORMAT", choices=("HYBRID", "E4M3", "E5M2")),
    _fp8("--fp8_amax_history_len", "amax_history_len", "Amax history length (te).", "int",
         env="ACCELERATE_FP8_AMAX_HISTORY_LEN"),
    _fp8("--fp8_amax_compute_algo", "amax_compute_algo", "max or most_recent (te).", "choice",
         env="ACCELERATE_FP8_AMAX_COMPUTE_ALGO", choices=("max", "most_recent")),
    _fp8("--fp8_override_linear_precision", "override_linear_precision", "Three booleans "
         "(fprop, dgrad, wgrad) run in higher precision, e.g. (false, false, true) (te).",
         metavar="(F,D,W)"),
    _fp8("--fp8_opt_level", "opt_level", "MS-AMP level O1 or O2.", "choice",
         env="ACCELERATE_FP8_OPT_LEVEL", choices=("O1", "O2")),
    _fp8("--fp8_enable_fsdp_float8_all_gather", "enable_fsdp_float8_all_gather", "All-gather "
         "FSDP2 parameters in float8 (ao).", "bool",
         env="ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"),
    _fp8("--fp8_pad_inner_dim", "pad_inner_dim", "Pad inner dimensions to 16 (ao).", "bool",
         env="ACCELERATE_FP8_PAD_INNER_DIM"),
))


def _refused(opt: str, why: str, kind: str = "str", **kw: object) -> Flag:
    return Flag((opt,), "Refused: " + why.split(":")[0].rstrip(".") + ".", kind,
                unsupported=why, **kw)  # type: ignore[arg-type]


#: Accelerate's defaults of its Megatron-LM flags (1 = no split, clip at 1.0, False = off):
#: a namespace built for Accelerate carries them, and they pass.
_MEGATRON_OFF = {"tp_degree": ("1",), "pp_degree": ("1",), "gradient_clipping": ("1.0", "1")}
_MEGATRON_NAMES = (  # Accelerate 1.15's --megatron_lm_* flags, by value kind
    *((n, "str") for n in ("sequence_parallelism", "recompute_activations",
                           "use_distributed_optimizer", "recompute_granularity",
                           "recompute_method", "attention_backend",
                           "attention_softmax_in_fp32", "calculate_per_token_loss",
                           "use_rotary_position_embeddings")),
    *((n, "int") for n in ("tp_degree", "pp_degree", "num_micro_batches",
                           "decoder_last_pipeline_num_layers", "recompute_num_layers",
                           "expert_model_parallel_size", "context_parallel_size",
                           "expert_tensor_parallel_size")),
    *((n, "float") for n in ("gradient_clipping", "attention_dropout", "hidden_dropout")),
    # type=bool in Accelerate (default False): any text but "" turns them on there
    *((n, "bool-like") for n in ("use_custom_fsdp", "no_load_optim", "no_save_optim",
                                 "eod_mask_loss", "overlap_cpu_optimizer_d2h_h2d",
                                 "optimizer_cpu_offload", "use_precision_aware_optimizer")),
)
_MEGATRON_FLAGS = tuple(
    _refused(f"--megatron_lm_{n}", _MEGATRON, "str" if kind == "bool-like" else kind,
             inert=_MEGATRON_OFF.get(n, ("False", "false") if kind == "bool-like" else ()))
    for n, kind in _MEGATRON_NAMES)
_FSDP_AC_OFFLOAD = (
    "offloading checkpointed activations to CPU is not implemented by accel's FSDP2: drop "
    "--fsdp_activation_checkpointing_offload (activations stay on the device) and keep "
    "--fsdp_activation_checkpointing true, or lower the batch size.")

_UNSUPPORTED = Group("refused (Megatron-LM, TPU, SageMaker, IPEX/XPU)", "Accepted by "
                     "Accelerate; accel answers each with one clear error.", (
    *_MEGATRON_FLAGS,
    _refused("--fsdp_activation_checkpointing_offload", _FSDP_AC_OFFLOAD, "str",
             inert=("False", "false"),
             config=("fsdp_config", "fsdp_activation_checkpointing_offload")),
    _refused("--ipex", _IPEX, "switch"),
    _refused("--use_xpu", _IPEX, "switch"),
    _refused("--tpu_cluster", _TPU, "switch", dest_name="tpu_use_cluster"),
    _refused("--no_tpu_cluster", _TPU, "switch"),
    _refused("--tpu_use_sudo", _TPU, "switch"),
    _refused("--vm", _TPU, "multi"),
    _refused("--env", _TPU, "multi", dest_name="tpu_env"),
    _refused("--aws_access_key_id", _SAGEMAKER),
    _refused("--aws_secret_access_key", _SAGEMAKER),
))

PLUGIN_GROUPS = (_PARADIGM, _DYNAMO, _DEEPSPEED, _FSDP, _PARALLELISM, _FP8, _UNSUPPORTED)
