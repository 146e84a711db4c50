"""Tiny models, tokenizer and data for the Hugging Face tests: everything is built here from
configs, nothing is fetched from a hub (these machines reach no hub)."""

from __future__ import annotations

from typing import Any

import torch

VOCAB = 48
CHARS = "abcdefghijklmnopqrstuvwxyz .,!?"
TEXTS = ["the quick brown fox jumps over the lazy dog", "hello world, a tiny corpus",
         "accel runs the trainer", "peft and trl on a small model", "one two three four"]


def gpt2_config(**overrides: Any):
    from transformers import GPT2Config

    fields = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=64,
                  bos_token_id=1, eos_token_id=1, pad_token_id=0,
                  # no dropout: runs that split the same batches differently (accumulation,
                  # 2 processes) then compute the same gradients
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2Config(**{**fields, **overrides})


def gpt2(seed: int = 0):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(gpt2_config())


def tokenizer():
    """A character-level tokenizer built with `tokenizers` (no file, no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    assert len(vocab) <= VOCAB
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


class TokenDataset(torch.utils.data.Dataset):
    """``size`` fixed random sequences of ``length`` tokens, labels = inputs (causal LM)."""

    def __init__(self, size: int = 32, length: int = 16) -> None:
        self.size, self.length = size, length

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        ids = torch.randint(3, VOCAB, (self.length,), generator=generator)
        return {"input_ids": ids, "labels": ids.clone()}


def text_dataset(repeat: int = 4):
    from datasets import Dataset

    return Dataset.from_dict({"text": TEXTS * repeat})


def training_args(output_dir: str, **overrides: Any):
    from transformers import TrainingArguments

    fields = dict(output_dir=output_dir, per_device_train_batch_size=4, max_steps=4,
                  learning_rate=1e-2, logging_steps=1, save_strategy="no", report_to=[],
                  use_cpu=True, seed=0, data_seed=0, disable_tqdm=True)
    return TrainingArguments(**{**fields, **overrides})


def losses(trainer) -> dict[int, float]:
    """``{step: loss}`` of the steps ``trainer`` logged (resumed runs include the old ones)."""
    return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}


def weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}
