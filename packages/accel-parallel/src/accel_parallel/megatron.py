"""Accelerate's Megatron-LM names, refused: accel does not run Megatron-LM (DESIGN §8).

Torch-native tensor, sequence and pipeline parallelism play its role. So that scripts
written for Accelerate still *import*, every name exists (``accel.utils.megatron_lm``
re-exports them); building or calling one raises :class:`ConfigurationError` pointing at
the torch-native way. Classes can still be subclassed (a script may define its own
``TrainStep`` at import time); making an instance is what is refused. The Accelerator's
``megatron_lm_plugin=`` and ``ACCELERATE_USE_MEGATRON_LM`` are refused here too
(:func:`refuse_megatron_plugin`), with the same pointer.
"""

from __future__ import annotations

from typing import Any, NoReturn

from accel_state import env
from accel_state.errors import ConfigurationError

__all__ = [
    "MEGATRON_LM_REFUSAL", "refuse_megatron_plugin", "MODEL_CONFIGS_TO_MEGATRON_PARSERS",
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

MEGATRON_LM_REFUSAL = (
    "Megatron-LM is not supported by accel; its role is played by torch-native parallelism. "
    "Use Accelerator(parallelism_config=ParallelismConfig(tp_size=N, dp_shard_size=M)) for "
    "tensor/sequence parallelism on FSDP2 (`accel launch --use_parallelism_config "
    "--parallelism_config_tp_size N`), and ParallelismConfig(pp_size=N) for pipeline stages "
    "(`--parallelism_config_pp_size N`; docs/parallel.md).")

#: Accelerate's registry of model-config parsers for Megatron-LM: empty, nothing registers.
MODEL_CONFIGS_TO_MEGATRON_PARSERS: dict[str, Any] = {}


def _refuse(what: str) -> NoReturn:
    raise ConfigurationError(f"{what} is refused: {MEGATRON_LM_REFUSAL}")


class _Refused:
    """Importable and subclassable; an instance is refused with the pointer above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse(f"{type(self).__name__}(...)")


class MegatronLMPlugin(_Refused):
    """Accelerate's Megatron-LM plugin: refused on construction (see the module docs)."""


class MegatronEngine(_Refused):
    """Accelerate's Megatron-LM model wrapper: refused."""


class MegatronLMOptimizerWrapper(_Refused):
    """Accelerate's Megatron-LM optimizer wrapper: refused."""


class MegatronLMSchedulerWrapper(_Refused):
    """Accelerate's Megatron-LM scheduler wrapper: refused."""


class MegatronLMDummyDataLoader(_Refused):
    """Accelerate's Megatron-LM dataloader placeholder: refused."""


class MegatronLMDummyScheduler(_Refused):
    """Accelerate's Megatron-LM scheduler placeholder: refused."""


class AbstractTrainStep(_Refused):
    """Accelerate's base of the Megatron-LM train steps: refused."""


class BertTrainStep(AbstractTrainStep):
    """Refused (Megatron-LM)."""


class GPTTrainStep(AbstractTrainStep):
    """Refused (Megatron-LM)."""


class T5TrainStep(AbstractTrainStep):
    """Refused (Megatron-LM)."""


def _refusing(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse(f"{name}()")

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"Accelerate's Megatron-LM ``{name}``: refused (see the module docs)."
    return refused


avg_losses_across_data_parallel_group = _refusing("avg_losses_across_data_parallel_group")
gather_across_data_parallel_groups = _refusing("gather_across_data_parallel_groups")
initialize = _refusing("initialize")
finish_mpu_init = _refusing("finish_mpu_init")
model_provider_func = _refusing("model_provider_func")
prepare_data_loader = _refusing("prepare_data_loader")
prepare_model_optimizer_scheduler = _refusing("prepare_model_optimizer_scheduler")
prepare_optimizer = _refusing("prepare_optimizer")
prepare_scheduler = _refusing("prepare_scheduler")
add_model_config_to_megatron_parser = _refusing("add_model_config_to_megatron_parser")
parse_bert_config = _refusing("parse_bert_config")
parse_gpt2_config = _refusing("parse_gpt2_config")
parse_t5_config = _refusing("parse_t5_config")
parse_llama_config = _refusing("parse_llama_config")
parse_glm4_moe_config = _refusing("parse_glm4_moe_config")


def refuse_megatron_plugin(plugin: Any, where: str) -> None:
    """Accelerate's ``megatron_lm_plugin`` given to ``where`` (``Accelerator``,
    ``AcceleratorState``): accepted as None (its default), refused otherwise, as is
    ``ACCELERATE_USE_MEGATRON_LM`` (from which Accelerate would build one)."""
    if plugin is not None:
        _refuse(f"{where}(megatron_lm_plugin={plugin!r})")
    found = env.USE_MEGATRON_LM.raw()
    if found is not None and env.USE_MEGATRON_LM.get_bool():
        raise ConfigurationError(f"{found[0]}={found[1]} asks for Megatron-LM: unset the "
                                 f"variable. {MEGATRON_LM_REFUSAL}")
