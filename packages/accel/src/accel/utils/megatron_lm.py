"""Accelerate's ``accelerate.utils.megatron_lm`` path: its Megatron-LM names, refused.

accel does not run Megatron-LM (DESIGN §8); every name exists so that scripts written for
Accelerate still import, and building or calling one is refused pointing at torch-native
parallelism. The names live in accel-parallel (``accel_parallel.megatron``), beside the
strategies that play Megatron-LM's role; this module only re-exports them.
"""

from __future__ import annotations

from accel_parallel.megatron import (  # noqa: F401 - Accelerate's names, re-exported
    MEGATRON_LM_REFUSAL,
    MODEL_CONFIGS_TO_MEGATRON_PARSERS,
    AbstractTrainStep,
    BertTrainStep,
    GPTTrainStep,
    MegatronEngine,
    MegatronLMDummyDataLoader,
    MegatronLMDummyScheduler,
    MegatronLMOptimizerWrapper,
    MegatronLMPlugin,
    MegatronLMSchedulerWrapper,
    T5TrainStep,
    add_model_config_to_megatron_parser,
    avg_losses_across_data_parallel_group,
    finish_mpu_init,
    gather_across_data_parallel_groups,
    initialize,
    model_provider_func,
    parse_bert_config,
    parse_glm4_moe_config,
    parse_gpt2_config,
    parse_llama_config,
    parse_t5_config,
    prepare_data_loader,
    prepare_model_optimizer_scheduler,
    prepare_optimizer,
    prepare_scheduler,
)

from accel._module_compat import forward_to

__all__ = [
    "MEGATRON_LM_REFUSAL", "MODEL_CONFIGS_TO_MEGATRON_PARSERS",
    "AbstractTrainStep",
    "BertTrainStep", "GPTTrainStep", "MegatronEngine", "MegatronLMDummyDataLoader",
    "MegatronLMDummyScheduler", "MegatronLMOptimizerWrapper", "MegatronLMPlugin",
    "MegatronLMSchedulerWrapper", "T5TrainStep", "add_model_config_to_megatron_parser",
    "avg_losses_across_data_parallel_group", "finish_mpu_init",
    "gather_across_data_parallel_groups", "initialize", "model_provider_func",
    "parse_bert_config", "parse_glm4_moe_config", "parse_gpt2_config", "parse_llama_config",
    "parse_t5_config", "prepare_data_loader", "prepare_model_optimizer_scheduler",
    "prepare_optimizer", "prepare_scheduler",
]

# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.optimizer", "accel.scheduler")
