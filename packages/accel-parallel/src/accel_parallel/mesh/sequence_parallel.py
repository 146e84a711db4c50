"""Accelerate's ``DeepSpeedSequenceParallelConfig``: the options of ALST/Ulysses sequence
parallelism (``ParallelismConfig(sp_size=N, sp_backend="deepspeed", sp_handler=...)``), and
the N-D strategy's two Ulysses steps.

Ulysses splits each sequence over ``sp_size`` processes and, around attention, trades the
sequence split for a split over attention heads (an all-to-all), so every process runs
ordinary attention on a slice of the heads. It is driven by ``position_ids`` rather than an
attention mask, which decides the attention implementations it can use.

accel runs it torch-natively on the run's one mesh (:mod:`accel_parallel.mesh.ulysses`, the
``sp`` dimension): ``sp_backend="deepspeed"`` (Accelerate's name, the default) and
``"torch"`` (accel's) select the same implementation, which needs no DeepSpeed; parameters
are sharded by FSDP2 over ``dp_shard`` x ``sp`` (``dp_shard_cp``), which also averages their
gradients over the ``sp`` ranks. A DeepSpeed plugin with ``sp_size > 1`` is refused
(:func:`check_sequence_parallel_runtime`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accel_state import ConfigurationError
from accel_state import env as _env

from accel_parallel.mesh.ulysses import UlyssesForward, attention_patterns, core_attention_modules
from accel_parallel.mesh.ulysses_data import shard_loader
from accel_parallel.mesh.ulysses_hf import (
    SP_ATTN_IMPLEMENTATIONS,
    apply_to_transformers,
    uses_attention_interface,
)

if TYPE_CHECKING:
    import torch

__all__ = ["DeepSpeedSequenceParallelConfig", "SP_ATTN_IMPLEMENTATIONS",
           "check_sequence_parallel_runtime", "apply_sequence_parallel",
           "shard_for_sequence_parallel", "apply_ulysses"]

_MASK_BASED = ("eager", "flex_attention")


def _is_hub_flash_kernel(name: str) -> bool:
    """A kernel from the Hub such as ``kernels-community/flash-attn2``."""
    return "/" in name and "flash-attn" in name


@dataclass(kw_only=True)
class DeepSpeedSequenceParallelConfig:
    """Options of Ulysses sequence parallelism (``ParallelismConfig(sp_handler=...)``).

    Fields left as None come from Accelerate's ``PARALLELISM_CONFIG_SP_*`` variables (what
    its launcher and ``accel launch --parallelism_config_sp_*`` write).
    """

    sp_seq_length: int | None = None
    """The sequence length every batch has when it is fixed (a multiple of ``sp_size``);
    optional when it varies (env PARALLELISM_CONFIG_SP_SEQ_LENGTH)."""
    sp_seq_length_is_variable: bool | None = None
    """True (default): the length is read from each batch, so batches may differ; False:
    every batch is padded to ``sp_seq_length`` (env ..._SP_SEQ_LENGTH_IS_VARIABLE)."""
    sp_attn_implementation: str | None = None
    """``sdpa``, ``flash_attention_2``, ``flash_attention_3`` or a hub flash-attn kernel
    (``"org/flash-attn..."``); ``eager`` and ``flex_attention`` need a mask Ulysses does
    not build (env ..._SP_ATTN_IMPLEMENTATION). For a transformers model, the core its
    attention interface calls (default: the model's own when it is one of these, else sdpa)."""
    sp_attention_modules: list[str] | None = None
    """accel's addition: module-name patterns (``*`` for one name component) of the modules
    that compute attention from ``(q, k, v)`` laid out ``(batch, heads, seq, head_dim)``,
    e.g. ``["layers.*.attn.core"]``; None: the model's ``_sp_plan``, else (a transformers
    model) its attention interface."""

    def __post_init__(self) -> None:
        self.sp_seq_length = self._seq_length()
        self.sp_seq_length_is_variable = self._is_variable()
        self.sp_attn_implementation = self._attn_implementation()
        modules = self.sp_attention_modules
        if modules is not None:
            if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
                raise ConfigurationError(
                    f"DeepSpeedSequenceParallelConfig(sp_attention_modules={modules!r}) must be "
                    "a list of module-name patterns, e.g. ['layers.*.attn.core'].")
            self.sp_attention_modules = list(modules)
        if not self.sp_seq_length_is_variable and self.sp_seq_length is None:
            raise ConfigurationError(
                "DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False) needs "
                "sp_seq_length (the padded length of every batch): set it, or leave "
                "sp_seq_length_is_variable=True to take each batch's length.")

    def _given(self, name: str, variable: Any) -> tuple[str, Any]:
        """``(where, value)`` of field ``name``, else of its environment ``variable``
        (``value`` None when neither is set)."""
        value = getattr(self, name)
        if value is not None:
            return name, value
        found = variable.raw()
        if found is None or not found[1].strip():
            return name, None
        return f"{found[0]} (env)", found[1].strip()

    def _seq_length(self) -> int | None:
        where, value = self._given("sp_seq_length", _env.PARALLELISM_CONFIG_SP_SEQ_LENGTH)
        if value is None:
            return None
        try:
            number = int(value) if not isinstance(value, (bool, float)) else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < 1:
            raise ConfigurationError(f"DeepSpeedSequenceParallelConfig {where}={value!r} must be "
                                     "a whole number of tokens >= 1 (or None when lengths vary).")
        return number

    def _is_variable(self) -> bool:
        value = self.sp_seq_length_is_variable
        if value is None:
            return _env.PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE.get_bool(True)
        if not isinstance(value, bool):
            raise ConfigurationError(f"DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable="
                                     f"{value!r}) must be True or False.")
        return value

    def _attn_implementation(self) -> str | None:
        where, value = self._given("sp_attn_implementation",
                                   _env.PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigurationError(f"DeepSpeedSequenceParallelConfig {where}={value!r} must be "
                                     f"a string: one of {', '.join(SP_ATTN_IMPLEMENTATIONS)}.")
        if value in _MASK_BASED:
            raise ConfigurationError(
                f"DeepSpeedSequenceParallelConfig {where}={value!r} is not supported: Ulysses "
                "attends by position_ids, not by an attention mask, which this implementation "
                "needs. Use flash_attention_2 / flash_attention_3 (correct for packed samples) "
                "or sdpa.")
        if value not in SP_ATTN_IMPLEMENTATIONS and not _is_hub_flash_kernel(value):
            raise ConfigurationError(
                f"Invalid sp_attn_implementation: DeepSpeedSequenceParallelConfig {where}="
                f"{value!r} is not known: use one of "
                f"{', '.join(SP_ATTN_IMPLEMENTATIONS)}, or a hub flash-attn kernel such as "
                "'kernels-community/flash-attn2'.")
        return value

    def check_sp_size(self, sp_size: int) -> None:
        """The fixed sequence length must split evenly over ``sp_size`` processes."""
        if self.sp_seq_length is not None and self.sp_seq_length % sp_size:
            raise ConfigurationError(
                f"DeepSpeedSequenceParallelConfig(sp_seq_length={self.sp_seq_length}) does not "
                f"split over sp_size={sp_size} processes: use a multiple of {sp_size} (pad "
                f"batches with pad_to_multiple_of={sp_size}).")


def check_sequence_parallel_runtime(config: Any, strategy: str = "nd") -> None:
    """Refuse ``sp_size > 1`` where accel cannot run it: under ``strategy="deepspeed"``
    (DeepSpeed's engine owns the model, and accel's Ulysses runs on the N-D strategy's mesh)."""
    if config is None or getattr(config, "sp_size", 1) <= 1 or strategy != "deepspeed":
        return
    raise ConfigurationError(
        f"ParallelismConfig(sp_size={config.sp_size}, sp_backend={config.sp_backend!r}) with a "
        "DeepSpeed plugin: accel runs Ulysses sequence parallelism torch-natively on its own "
        "device mesh, not inside DeepSpeed's engine (DeepSpeed's ALST is not wired into "
        "accel's DeepSpeed strategy). Drop the DeepSpeed plugin and keep the ParallelismConfig "
        "(dp_shard_size shards parameters, gradients and optimizer state like ZeRO-3), or run "
        "this script with Hugging Face Accelerate.")


def apply_sequence_parallel(model: torch.nn.Module, mesh: Any, config: Any) -> list[str]:
    """The N-D strategy's Ulysses step (after TP, before FSDP2): wrap the model's core
    attention with the exchange over the mesh's ``sp`` dimension; names what it wrapped."""
    if not config.sp_enabled:
        return []
    return apply_ulysses(model, mesh.submesh("sp").get_group(), config.sp_handler)


def shard_for_sequence_parallel(dataloader: Any, mesh: Any, config: Any) -> Any:
    """The loader whose batches are this rank's sequence shards (unchanged without SP)."""
    if not config.sp_enabled or mesh is None:
        return dataloader
    handler = config.sp_handler
    fixed = None if handler is None or handler.sp_seq_length_is_variable else \
        handler.sp_seq_length
    return shard_loader(dataloader, mesh.rank("sp"), mesh.size("sp"), fixed)


def apply_ulysses(model: torch.nn.Module, group: Any, handler: Any = None) -> list[str]:
    """Wrap the model's core attention with the Ulysses exchange over ``group``; returns the
    names of the wrapped modules (``["<attention interface>"]`` for a transformers model
    wrapped through its attention interface). A model with nothing named and no attention
    interface is an error that says how to name its core attention."""
    patterns = attention_patterns(model, handler)
    if patterns is not None:
        targets = core_attention_modules(model, patterns)
        for _, module in targets:
            if not isinstance(module.forward, UlyssesForward):
                module.forward = UlyssesForward(module.forward, group)
        return [name for name, _ in targets]
    if uses_attention_interface(model):
        apply_to_transformers(model, group, handler)
        return ["<attention interface>"]
    raise ConfigurationError(
        f"Ulysses sequence parallelism (sp_size > 1) needs to know which modules of "
        f"{type(model).__name__} compute attention from (q, k, v): pass ParallelismConfig("
        "sp_handler=DeepSpeedSequenceParallelConfig(sp_attention_modules=['layers.*.attn."
        "core'])) or set model._sp_plan to such a list (a transformers model is found through "
        "its attention interface).")
