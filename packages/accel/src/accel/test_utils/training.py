"""Accelerate's ``accelerate.test_utils.training`` path: the regression dataset and model its
test scripts train, and the MRPC dataloaders its example tests mock.

``RegressionDataset``/``RegressionModel`` draw the same numbers from the same seeds as
Accelerate's, so a test script written for Accelerate checks the same values on accel.
``datasets`` and ``transformers`` are imported only by the dataloader helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from accel_state.errors import MissingDependencyError
from torch.utils.data import DataLoader

from accel.utils.dataclasses import DistributedType

__all__ = ["DistributedType", "RegressionDataset", "RegressionModel", "mocked_dataloaders",
           "mocked_dataloaders_for_autoregressive_models"]

#: Accelerate's MRPC samples, relative to the working directory (its repository root).
_MRPC = {"train": "tests/test_samples/MRPC/train.csv",
         "validation": "tests/test_samples/MRPC/dev.csv"}


class RegressionDataset:
    """``length`` samples of ``y = a * x + b + noise`` (x ~ N(0, 1), noise ~ N(0, 0.1)),
    float32, drawn from ``numpy.random.default_rng(seed)`` in Accelerate's order."""

    def __init__(self, a: float = 2, b: float = 3, length: int = 64,
                 seed: int | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.length = length
        self.x = rng.normal(size=(length,)).astype(np.float32)
        noise = rng.normal(scale=0.1, size=(length,)).astype(np.float32)
        self.y = a * self.x + b + noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "y": self.y[i]}


class RegressionModel(torch.nn.Module):
    """``x * a + b`` with scalar float parameters ``a`` and ``b``; prints the dtypes on the
    first call (Accelerate's mixed-precision tests read that line)."""

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a).float())
        self.b = torch.nn.Parameter(torch.tensor(b).float())
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if x is None:
            raise TypeError("RegressionModel.forward needs the input x (a tensor)")
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b


def _hf_suite(feature: str) -> tuple[Any, Any]:
    """``(datasets.load_dataset, transformers.AutoTokenizer)``, or MissingDependencyError."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise MissingDependencyError("datasets", feature=feature) from None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingDependencyError("transformers", feature=feature) from None
    return load_dataset, AutoTokenizer


def mocked_dataloaders(accelerator: Any, batch_size: int = 16) -> tuple[DataLoader, DataLoader]:
    """MRPC train/validation loaders (bert-base-cased tokens, batch sizes 2 and 1, as
    Accelerate's; ``batch_size`` is accepted and unused there too), read from
    ``tests/test_samples/MRPC``; needs ``datasets`` and ``transformers``."""
    load_dataset, auto_tokenizer = _hf_suite("mocked_dataloaders")
    tokenizer = auto_tokenizer.from_pretrained("bert-base-cased")
    raw = load_dataset("csv", data_files=_MRPC)
    label_to_id = {v: i for i, v in enumerate(raw["train"].unique("label"))}

    def tokenize(examples: dict[str, Any]) -> Any:
        outputs = tokenizer(examples["sentence1"], examples["sentence2"], truncation=True,
                            max_length=None, padding="max_length")
        if "label" in examples:
            outputs["labels"] = [label_to_id[label] for label in examples["label"]]
        return outputs

    tokenized = raw.map(tokenize, batched=True, remove_columns=["sentence1", "sentence2", "label"])

    def collate(examples: list[Any]) -> Any:
        if accelerator.distributed_type == DistributedType.XLA:
            return tokenizer.pad(examples, padding="max_length", max_length=128,
                                 return_tensors="pt")
        return tokenizer.pad(examples, padding="longest", return_tensors="pt")

    return (DataLoader(tokenized["train"], shuffle=True, collate_fn=collate, batch_size=2),
            DataLoader(tokenized["validation"], shuffle=False, collate_fn=collate, batch_size=1))


def mocked_dataloaders_for_autoregressive_models(
        accelerator: Any, batch_size: int = 16) -> tuple[DataLoader, DataLoader]:
    """MRPC first sentences as next-token batches for a causal LM (SmolLM-360M's tokenizer,
    labels shifted by one, padding labelled -100), as Accelerate's; needs ``datasets`` and
    ``transformers``."""
    load_dataset, auto_tokenizer = _hf_suite("mocked_dataloaders_for_autoregressive_models")
    tokenizer = auto_tokenizer.from_pretrained("HuggingFaceTB/SmolLM-360M")
    tokenizer.pad_token = tokenizer.eos_token
    raw = load_dataset("csv", data_files=_MRPC)

    def tokenize(examples: dict[str, Any]) -> Any:
        return tokenizer(examples["sentence1"], truncation=True, max_length=None,
                         return_attention_mask=False)

    with accelerator.main_process_first():
        tokenized = raw.map(tokenize, batched=True,
                            remove_columns=["sentence1", "sentence2", "label"])

    def collate(examples: list[Any]) -> Any:
        longest = max(len(e["input_ids"]) for e in examples)
        max_length = 128 if accelerator.distributed_type == DistributedType.XLA else longest
        multiple = {"fp8": 16, "no": None}.get(accelerator.mixed_precision, 8)
        batch = tokenizer.pad(examples, padding="max_length", max_length=max_length + 1,
                              pad_to_multiple_of=multiple, return_tensors="pt")
        batch["labels"] = batch["input_ids"][:, 1:]
        batch["input_ids"] = batch["input_ids"][:, :-1]
        if "attention_mask" in batch:
            batch["attention_mask"] = batch["attention_mask"][:, :-1]
        batch["labels"] = torch.where(batch["labels"] == tokenizer.pad_token_id, -100,
                                      batch["labels"])
        return batch

    return (DataLoader(tokenized["train"], shuffle=False, collate_fn=collate, batch_size=2),
            DataLoader(tokenized["validation"], shuffle=False, collate_fn=collate, batch_size=1))
