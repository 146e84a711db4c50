"""Accelerate's ``BnbQuantizationConfig``: how ``load_and_quantize_model`` quantises a model
with bitsandbytes (8-bit LLM.int8() or 4-bit fp4/nf4 ``nn.Linear`` layers).

Pure configuration: building and validating it needs neither bitsandbytes nor a GPU.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from accel_state.enums import CustomDtype
from accel_state.errors import ConfigurationError

__all__ = ["BnbQuantizationConfig", "QUANT_TYPES"]

#: 4-bit data types of ``bnb.nn.Linear4bit``
QUANT_TYPES = ("fp4", "nf4")
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
           "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _dtype(value: Any, name: str) -> torch.dtype:
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return value
    if isinstance(value, str) and value.removeprefix("torch.") in _DTYPES:
        return _DTYPES[value.removeprefix("torch.")]
    raise ConfigurationError(f"BnbQuantizationConfig({name}={value!r}) must be 'fp32', 'fp16', "
                             "'bf16' or a floating torch.dtype such as torch.bfloat16.")


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"BnbQuantizationConfig({name}={value!r}) must be True or False.")
    return value


def _names(value: Any, name: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"BnbQuantizationConfig({name}={value!r}) must be a list of "
                                 "module names, e.g. ['lm_head'].")
    return list(value)


@dataclass(kw_only=True)
class BnbQuantizationConfig:
    """Which bitsandbytes quantisation to apply, and what to leave unquantised.

    Exactly one of ``load_in_8bit`` / ``load_in_4bit`` is True. ``nn.Linear`` layers become
    ``bnb.nn.Linear8bitLt`` / ``bnb.nn.Linear4bit``; every other floating tensor is kept in
    ``torch_dtype`` (float32 in ``keep_in_fp32_modules``).
    """

    load_in_8bit: bool = False
    """LLM.int8(): int8 weights, outlier features above ``llm_int8_threshold`` in 16 bits."""
    llm_int8_threshold: float = 6.0
    """Activation magnitude above which a feature is an outlier (8-bit only)."""
    load_in_4bit: bool = False
    """4-bit weights (``bnb_4bit_quant_type``), computed in ``bnb_4bit_compute_dtype``."""
    bnb_4bit_quant_type: str = "fp4"
    """4-bit data type: ``fp4`` or ``nf4`` (normal float, suited to normally spread weights)."""
    bnb_4bit_use_double_quant: bool = False
    """Quantise the quantisation constants too (saves about 0.4 bit per weight)."""
    bnb_4bit_compute_dtype: Any = "fp16"
    """Dtype the 4-bit matmuls run in: ``fp32``, ``fp16``, ``bf16`` or a torch dtype."""
    torch_dtype: Any = None
    """Dtype of the tensors that are not quantised; default float16 (8-bit) or the compute
    dtype (4-bit)."""
    skip_modules: list[str] | None = None
    """Modules left unquantised (in ``torch_dtype``); None: the output head and the modules
    of tied weights (filled in by ``load_and_quantize_model``)."""
    keep_in_fp32_modules: list[str] | None = None
    """Modules left unquantised and kept in float32."""
    target_dtype: Any = field(default=None, init=False)
    """What quantised weights weigh, for device maps: ``torch.int8`` or ``CustomDtype.INT4``."""

    def __post_init__(self) -> None:
        _flag(self.load_in_8bit, "load_in_8bit")
        _flag(self.load_in_4bit, "load_in_4bit")
        if self.load_in_8bit == self.load_in_4bit:
            raise ConfigurationError(
                f"BnbQuantizationConfig(load_in_8bit={self.load_in_8bit}, load_in_4bit="
                f"{self.load_in_4bit}): set exactly one of them to True.")
        if isinstance(self.llm_int8_threshold, bool) or \
                not isinstance(self.llm_int8_threshold, (int, float)):
            raise ConfigurationError(f"BnbQuantizationConfig(llm_int8_threshold="
                                     f"{self.llm_int8_threshold!r}) must be a number "
                                     "(default 6.0).")
        if self.bnb_4bit_quant_type not in QUANT_TYPES:
            raise ConfigurationError(f"BnbQuantizationConfig(bnb_4bit_quant_type="
                                     f"{self.bnb_4bit_quant_type!r}) must be 'fp4' or 'nf4'.")
        _flag(self.bnb_4bit_use_double_quant, "bnb_4bit_use_double_quant")
        self.bnb_4bit_compute_dtype = _dtype(self.bnb_4bit_compute_dtype,
                                             "bnb_4bit_compute_dtype")
        self.skip_modules = _names(self.skip_modules, "skip_modules")
        self.keep_in_fp32_modules = _names(self.keep_in_fp32_modules, "keep_in_fp32_modules")
        if self.load_in_4bit and self.llm_int8_threshold != 6.0:
            warnings.warn("BnbQuantizationConfig: llm_int8_threshold only applies to 8-bit "
                          "(load_in_8bit=True); it is ignored with load_in_4bit.", UserWarning,
                          stacklevel=3)
        if self.torch_dtype is None:
            self.torch_dtype = torch.float16 if self.load_in_8bit else self.bnb_4bit_compute_dtype
        self.torch_dtype = _dtype(self.torch_dtype, "torch_dtype")
        self.target_dtype = torch.int8 if self.load_in_8bit else CustomDtype.INT4
