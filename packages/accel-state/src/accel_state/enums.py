"""String enums shared by every package (values match Accelerate's, so configs interoperate)."""

from __future__ import annotations

import enum

__all__ = ["BaseEnum", "EnumWithContains", "DistributedType", "ComputeEnvironment",
           "CustomDtype", "SageMakerDistributedType"]


class EnumWithContains(enum.EnumMeta):
    """Lets ``"MULTI_CPU" in DistributedType`` test membership by value."""

    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class BaseEnum(str, enum.Enum, metaclass=EnumWithContains):
    """A ``str`` enum whose members print as their value (Accelerate's ``BaseEnum``:
    ``PrecisionType``, ``LoggerType``, ...)."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def list(cls) -> list[str]:
        return [str(member.value) for member in cls]


class _NamedStrEnum(str, enum.Enum, metaclass=EnumWithContains):
    """A ``str`` enum that prints as ``Class.MEMBER`` (Accelerate's plain ``(str, Enum)``).

    ``str()``, ``format()`` and f-strings give ``"DistributedType.NO"``, as in Accelerate;
    the member still equals its value (``DistributedType.NO == "NO"``) and ``.value`` is
    the bare name. Use ``.value`` wherever the bare name must be written out.
    """

    @classmethod
    def list(cls) -> list[str]:
        return [str(member.value) for member in cls]


class DistributedType(_NamedStrEnum):
    """How the processes of a run cooperate (prints as ``DistributedType.NO``, as in
    Accelerate; ``.value`` is ``"NO"``)."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"


class ComputeEnvironment(_NamedStrEnum):
    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"


class SageMakerDistributedType(_NamedStrEnum):
    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"


class CustomDtype(enum.Enum):
    """Quantised weight formats torch has no dtype for, so size accounting
    (``accel_checkpoint.weights.dtype_byte_size``) can take them next to ``torch.dtype``."""

    FP8 = "fp8"
    INT4 = "int4"
    INT2 = "int2"
