"""The `accel config` questionnaire: questions -> a dict in Accelerate's YAML schema.

Asks what `accelerate config` asks for a local machine: machine type, machines and
rendezvous, processes, GPU ids, dynamo, DeepSpeed (its questions or a JSON path), FSDP,
ParallelismConfig (TP/CP), mixed precision and fp8. Only questions that matter for the
previous answers are asked. No torch import: the caller passes the GPU count.
"""

from __future__ import annotations

from typing import Any

from accel_launch.prompts import Prompter

__all__ = ["ask_config", "base_config"]

_MACHINES = ("No distributed training", "multi-CPU", "multi-GPU")
_MACHINE_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU")
_DYNAMO = ("eager", "aot_eager", "inductor", "cudagraphs")
_DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_WRAP = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
_STATE_DICT = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
_PRECISIONS = ("no", "fp16", "bf16", "fp8")


def base_config() -> dict[str, Any]:
    """The keys every config `accel config` writes has (Accelerate's defaults)."""
    return {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "NO",
        "mixed_precision": "no", "use_cpu": False, "debug": False, "num_processes": 1,
        "num_machines": 1, "machine_rank": 0, "main_training_function": "main",
        "enable_cpu_affinity": False, "downcast_bf16": "no", "rdzv_backend": "static",
        "same_network": True, "tpu_env": [], "tpu_use_cluster": False, "tpu_use_sudo": False,
    }


def _machines(p: Prompter, cfg: dict[str, Any]) -> None:
    machines = p.integer("How many different machines will you use (use more than 1 for "
                         "multi-node training)?", 1, minimum=1)
    cfg["num_machines"] = machines
    if machines > 1:
        cfg["machine_rank"] = p.integer("What is the rank of this machine?", 0)
        cfg["main_process_ip"] = p.text("What is the IP address of the machine that will "
                                        "host the main process?")
        cfg["main_process_port"] = p.integer("What is the port you will use to communicate "
                                             "with the main process?", 29500, minimum=1)
        cfg["same_network"] = p.yes_no("Are all the machines on the same local network?", True)
        cfg["rdzv_backend"] = ("static", "c10d")[p.choice(
            "What rendezvous backend will you use?", ("static", "c10d"))]


def _dynamo(p: Prompter, cfg: dict[str, Any]) -> None:
    if not p.yes_no("Do you wish to optimize your script with torch dynamo?", False):
        return
    backend = _DYNAMO[p.choice("Which dynamo backend would you like to use?", _DYNAMO, 2)]
    section = {"dynamo_backend": backend.upper()}
    if p.yes_no("Do you want to customize the defaults sent to torch.compile?", False):
        section["dynamo_mode"] = _DYNAMO_MODES[p.choice("Which mode do you want to use?",
                                                        _DYNAMO_MODES)]
        section["dynamo_use_fullgraph"] = p.yes_no("Do you want the fullgraph mode?", False)
        section["dynamo_use_dynamic"] = p.yes_no("Do you want to enable dynamic shape "
                                                 "tracing?", False)
        section["dynamo_use_regional_compilation"] = p.yes_no(
            "Do you want to enable regional compilation?", False)
    cfg["dynamo_config"] = section


def _deepspeed(p: Prompter, cfg: dict[str, Any]) -> None:
    cfg["distributed_type"] = "DEEPSPEED"
    ds: dict[str, Any] = {}
    if p.yes_no("Do you want to specify a json file to a DeepSpeed config?", False):
        ds["deepspeed_config_file"] = p.text("Please enter the path to the json DeepSpeed "
                                             "config file")
        ds["zero3_init_flag"] = p.yes_no("Do you want to enable `deepspeed.zero.Init` when "
                                         "using ZeRO Stage-3 for constructing massive models?",
                                         False)
        cfg["deepspeed_config"] = ds
        return
    stage = p.choice("What should be your DeepSpeed's ZeRO optimization stage?",
                     ("0", "1", "2", "3"), 2)
    ds["zero_stage"] = stage
    devices = ("none", "cpu", "nvme")
    if stage >= 2:
        ds["offload_optimizer_device"] = devices[p.choice(
            "Where to offload optimizer states?", devices)]
    if stage == 3:
        ds["offload_param_device"] = devices[p.choice("Where to offload parameters?", devices)]
        ds["zero3_init_flag"] = p.yes_no("Do you want to enable `deepspeed.zero.Init`?", False)
        ds["zero3_save_16bit_model"] = p.yes_no("Do you want to save 16-bit model weights "
                                                "when using ZeRO Stage-3?", False)
    ds["gradient_accumulation_steps"] = p.integer(
        "How many gradient accumulation steps you're passing in your script?", 1, minimum=1)
    if p.yes_no("Do you want to use gradient clipping?", False):
        ds["gradient_clipping"] = p.number("What is the gradient clipping value?", 1.0)
    cfg["deepspeed_config"] = ds


def _fsdp(p: Prompter, cfg: dict[str, Any]) -> None:
    cfg["distributed_type"] = "FSDP"
    fsdp: dict[str, Any] = {"fsdp_version": (2, 1)[p.choice(
        "What should be your FSDP version?", ("2", "1"))]}
    fsdp["fsdp_reshard_after_forward"] = p.yes_no(
        "Do you want to free the gathered parameters after forward (reshard_after_forward)?",
        True)
    fsdp["fsdp_offload_params"] = p.yes_no("Do you want to offload parameters and gradients "
                                           "to CPU?", False)
    wrap = _WRAP[p.choice("What should be your auto wrap policy?", _WRAP)]
    fsdp["fsdp_auto_wrap_policy"] = wrap
    if wrap == "TRANSFORMER_BASED_WRAP":
        names = p.text("Specify the comma-separated list of transformer layer class names "
                       "to wrap (empty: the model's _no_split_modules)", "")
        if names:
            fsdp["fsdp_transformer_layer_cls_to_wrap"] = names
    elif wrap == "SIZE_BASED_WRAP":
        fsdp["fsdp_min_num_params"] = p.integer("What should be your FSDP's minimum number "
                                                "of parameters for default auto wrapping?",
                                                100_000_000)
    fsdp["fsdp_state_dict_type"] = _STATE_DICT[p.choice(
        "What should be your FSDP's state dict type?", _STATE_DICT)]
    fsdp["fsdp_cpu_ram_efficient_loading"] = p.yes_no(
        "Do you want to enable CPU RAM efficient model loading?", True)
    fsdp["fsdp_activation_checkpointing"] = p.yes_no(
        "Do you want to enable FSDP activation checkpointing?", False)
    cfg["fsdp_config"] = fsdp


def _parallelism(p: Prompter, cfg: dict[str, Any]) -> None:
    pc = {"parallelism_config_dp_replicate_size": p.integer(
              "How many data-parallel replicas (dp_replicate_size)?", 1, minimum=1),
          "parallelism_config_dp_shard_size": p.integer(
              "Over how many processes should FSDP shard each replica (dp_shard_size)?", 1,
              minimum=1),
          "parallelism_config_tp_size": p.integer("Tensor-parallel size (tp_size)?", 1,
                                                  minimum=1),
          "parallelism_config_cp_size": p.integer("Context-parallel size (cp_size)?", 1,
                                                  minimum=1)}
    cfg["parallelism_config"] = pc


def _engine(p: Prompter, cfg: dict[str, Any]) -> None:
    if p.yes_no("Do you want to use DeepSpeed?", False):
        _deepspeed(p, cfg)
    elif p.yes_no("Do you want to use FullyShardedDataParallel (FSDP2)?", False):
        _fsdp(p, cfg)
    if cfg["distributed_type"] != "DEEPSPEED" and p.yes_no(
            "Do you want to use tensor/context parallelism (ParallelismConfig)?", False):
        _parallelism(p, cfg)


def _precision(p: Prompter, cfg: dict[str, Any]) -> None:
    if cfg["distributed_type"] == "DEEPSPEED" and "deepspeed_config_file" in \
            cfg.get("deepspeed_config", {}):
        return  # the JSON decides
    precision = _PRECISIONS[p.choice("Do you wish to use mixed precision?", _PRECISIONS)]
    cfg["mixed_precision"] = precision
    if precision == "fp8":
        backends = ("te", "ao")
        cfg["fp8_config"] = {"backend": backends[p.choice(
            "Which fp8 backend do you want to use?", ("te (Transformer Engine)", "ao (torchao)"),
            1)].upper()}


def ask_config(p: Prompter, cuda_devices: int = 0) -> dict[str, Any]:
    """Run the questionnaire; returns the config as a dict in Accelerate's schema."""
    cfg = base_config()
    p.choice("In which compute environment are you running?", ("This machine",))
    kind = p.choice("Which type of machine are you using?", _MACHINES,
                    2 if cuda_devices > 1 else 0)
    cfg["distributed_type"] = _MACHINE_TYPES[kind]
    if kind > 0:
        _machines(p, cfg)
        cfg["rdzv_backend"] = cfg.get("rdzv_backend", "static")
        cfg["debug"] = p.yes_no("Should distributed operations be checked while running for "
                                "errors? This can avoid timeout issues but will be slower.",
                                False)
    else:
        cfg["use_cpu"] = p.yes_no("Do you want to run your training on CPU only (even if a "
                                  "GPU is available)?", cuda_devices == 0)
    _dynamo(p, cfg)
    if kind == 2:
        _engine(p, cfg)
    if kind > 0:
        per_machine = max(cuda_devices, 1) if kind == 2 else 2
        cfg["num_processes"] = p.integer(
            "How many processes in total will you use (all machines together)?",
            per_machine * cfg["num_machines"], minimum=1)
    if kind == 2:
        cfg["gpu_ids"] = p.text("What GPU(s) (by id) should be used for training on this "
                                "machine as a comma-separated list?", "all")
    _precision(p, cfg)
    return cfg
