"""Ulysses sequence parallelism through the Accelerator (run with ``accel launch``): the tiny
Llama trained with ``ParallelismConfig(sp_size=2)`` (2 processes) or ``sp_size=2,
dp_shard_size=2`` (4 processes) against the same model trained in this process on the whole
global batches. Checked on every rank: the first step's logits (this rank's sequence shard)
and every gradient, then the loss of every step and the final weights, within ``TOL``; on 2
processes also save_state / load_state halfway (the state after load equals the state saved,
the resumed steps repeat the losses bit for bit), a transformers Llama through its attention
interface, and the refusal of a sequence length that does not divide.

argv: WORLD_SIZE [OUT_DIR]. Prints ``SP-OK rank=<r>``, ``SP-RESUME-OK rank=<r>`` (2
processes) and ``SP-HF-OK rank=<r>`` when transformers is installed.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from accel import Accelerator, ParallelismConfig
from accel.utils import DeepSpeedSequenceParallelConfig
from accel_parallel import sequence_parallel_mean
from accel_state import ConfigurationError
from tiny_llama import tiny_llama
from torch.utils.data import DataLoader

#: float32 on CPU: the sharded run sums the same terms in another order
TOL = {"atol": 2e-5, "rtol": 1e-4}
STEPS, SEQ, PER_RANK = 6, 16, 2


def rows(count: int, uneven: bool) -> list[dict[str, torch.Tensor]]:
    """Samples of a learnable sequence task; ``uneven``: random ``-100`` labels, so the two
    sequence shards count different numbers of tokens."""
    generator = torch.Generator().manual_seed(3)
    samples = []
    for _ in range(count):
        start = torch.randint(0, 64, (1,), generator=generator)
        ids = (start + torch.arange(SEQ + 1)) % 64
        labels = ids[1:].clone()
        labels[-1] = -100
        if uneven:
            labels[torch.rand(SEQ, generator=generator) < 0.3] = -100
        samples.append({"input_ids": ids[:-1], "labels": labels})
    return samples


def token_loss(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token loss of ``batch`` and the number of tokens counted."""
    logits = model(batch["input_ids"], batch.get("position_ids"))
    labels = batch["labels"]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")
    return loss, (labels != -100).sum(), logits


def full_grads(model) -> dict[str, torch.Tensor]:
    grads = {}
    for name, param in model.named_parameters():
        grad = param.grad
        grads[name] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    return grads


def reference_run(model, samples, global_batch: int, dp: int) -> tuple[list, list, dict]:
    """The unsharded run: mean over each data-parallel part of the global batch of its token
    mean (what the data-parallel average computes), SGD with momentum; losses, first
    gradients, weights."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
    losses, first = [], None
    for step in range(STEPS):
        chunk = samples[step * global_batch:(step + 1) * global_batch]
        parts = [chunk[i * PER_RANK:(i + 1) * PER_RANK] for i in range(dp)]
        loss = 0
        for part in parts:
            batch = {k: torch.stack([s[k] for s in part]) for k in part[0]}
            total, count, _ = token_loss(model, batch)
            loss = loss + total / count / dp
        loss.backward()
        if first is None:
            first = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, first, model.state_dict()


def main() -> None:
    sp = 2
    config = ParallelismConfig(sp_size=sp, dp_shard_size=int(sys.argv[1]) // sp,
                               sp_handler=DeepSpeedSequenceParallelConfig(
                                   sp_attn_implementation="sdpa"))
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    rank, dp = accelerator.process_index, config.dp_shard_size
    mesh = accelerator.torch_device_mesh
    sp_group, sp_rank = mesh["sp"].get_group(), mesh["sp"].get_local_rank()
    samples = rows(STEPS * PER_RANK * dp, uneven=dp == 1)
    model = tiny_llama(seed=0)
    reference = copy.deepcopy(model)
    model._sp_plan = ["layers.*.attn.core"]  # its core attention (a transformers model: none)
    first_batch = {k: torch.stack([s[k] for s in samples[:PER_RANK * dp]]) for k in samples[0]}
    full_logits = reference(first_batch["input_ids"])
    losses_ref, grads_ref, weights_ref = reference_run(reference, samples, PER_RANK * dp, dp)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.5)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(samples, batch_size=PER_RANK))

    def train_step(step: int, batch: dict[str, torch.Tensor]) -> float:
        assert batch["input_ids"].shape == (PER_RANK, SEQ // sp), batch["input_ids"].shape
        total, count, logits = token_loss(model, batch)
        loss = sequence_parallel_mean(total, count, sp_group)
        accelerator.backward(loss)
        if step == 0:
            dp_rank = accelerator.strategy.dp_rank
            mine = full_logits[dp_rank * PER_RANK:(dp_rank + 1) * PER_RANK]
            torch.testing.assert_close(logits, mine.chunk(sp, dim=1)[sp_rank], **TOL)
            for name, grad in full_grads(model).items():
                torch.testing.assert_close(grad, grads_ref[name], **TOL, msg=name)
        optimizer.step()
        optimizer.zero_grad()
        return accelerator.reduce(loss.detach(), "mean").item()

    batches, half = list(loader), STEPS // 2
    losses = [train_step(step, batch) for step, batch in enumerate(batches[:half])]
    if dp == 1:  # the 2-process run: save halfway, resume below
        checkpoint = Path(sys.argv[2]) / "sp-ckpt"
        accelerator.save_state(checkpoint)
        saved = accelerator.get_state_dict(model)
    losses += [train_step(step, batch) for step, batch in enumerate(batches[half:], half)]
    assert len(losses) == STEPS, losses
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(losses_ref), **TOL)
    weights = accelerator.get_state_dict(model)
    if rank == 0:
        for name, value in weights_ref.items():
            torch.testing.assert_close(weights[name], value, **TOL, msg=name)
    print(f"SP-OK rank={rank} losses={[round(v, 5) for v in losses]}", flush=True)
    if dp == 1:
        accelerator.load_state(checkpoint)  # SGD's momentum buffers too (sharded, DCP)
        loaded = accelerator.get_state_dict(model)
        if rank == 0:
            assert list(loaded) == list(saved) and all(torch.equal(loaded[k], saved[k])
                                                       for k in saved)
        resumed = [train_step(step, batch) for step, batch in enumerate(batches[half:], half)]
        assert resumed == losses[half:], (resumed, losses[half:])
        print(f"SP-RESUME-OK rank={rank}", flush=True)
        check_refusals(accelerator)
        check_accelerates_recipe(sp_group, sp_rank)
        check_transformers(accelerator, sp_group, sp_rank)


def check_accelerates_recipe(sp_group, sp_rank) -> None:
    """docs/parallel.md: Accelerate's loss recipe (a differentiable all_gather of the per-rank
    means weighted by their token counts) and sequence_parallel_mean agree, value and
    gradient (rank 0 counts 3 tokens summing to 6, rank 1 one token of loss 2)."""
    from torch.distributed.nn.functional import all_gather

    sums, counts = [6.0, 2.0], [3, 1]
    ours_sum = torch.tensor(sums[sp_rank], requires_grad=True)
    ours = sequence_parallel_mean(ours_sum, counts[sp_rank], sp_group)
    ours.backward()
    theirs_sum = torch.tensor(sums[sp_rank], requires_grad=True)
    losses = all_gather(theirs_sum / counts[sp_rank], group=sp_group)
    tokens = all_gather(torch.tensor(float(counts[sp_rank])), group=sp_group)
    theirs = sum(loss * n for loss, n in zip(losses, tokens, strict=True)) / sum(tokens)
    theirs.backward()
    assert abs(ours.item() - 2.0) < 1e-6 and abs(theirs.item() - 2.0) < 1e-6, (ours, theirs)
    assert abs(ours_sum.grad.item() - theirs_sum.grad.item()) < 1e-6, (ours_sum.grad,
                                                                       theirs_sum.grad)


def check_refusals(accelerator) -> None:
    odd = DataLoader([{"input_ids": torch.arange(7)}], batch_size=1)
    try:
        next(iter(accelerator.prepare(odd)))
    except ConfigurationError as error:
        assert "sequence length 7 does not divide by 2" in str(error), error
    else:
        raise AssertionError("a sequence of 7 tokens was split over sp_size=2")


def check_transformers(accelerator, sp_group, sp_rank) -> None:
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=1, attn_implementation="sdpa"))
    reference = copy.deepcopy(model)
    batch = {k: torch.stack([s[k] for s in rows(2, uneven=True)]) for k in ("input_ids",
                                                                          "labels")}
    out = reference(input_ids=batch["input_ids"])
    total, count = _hf_loss(out.logits, batch["labels"])
    (total / count).backward()
    model = accelerator.prepare(model)
    loader = accelerator.prepare(DataLoader(rows(2, uneven=True), batch_size=2))
    mine = next(iter(loader))
    logits = model(input_ids=mine["input_ids"], position_ids=mine["position_ids"]).logits
    torch.testing.assert_close(logits, out.logits.chunk(2, dim=1)[sp_rank], **TOL)
    total, count = _hf_loss(logits, mine["labels"])
    accelerator.backward(sequence_parallel_mean(total, count, sp_group))
    expected = {n: p.grad for n, p in reference.named_parameters()}
    for name, grad in full_grads(model).items():
        torch.testing.assert_close(grad, expected[name], **TOL, msg=name)
    print(f"SP-HF-OK rank={accelerator.process_index}", flush=True)


def _hf_loss(logits, labels) -> tuple[torch.Tensor, torch.Tensor]:
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")
    return loss, (labels != -100).sum()


if __name__ == "__main__":
    main()
