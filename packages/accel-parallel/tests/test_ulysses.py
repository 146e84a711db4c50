"""Ulysses sequence parallelism in one process: two gloo ranks in threads (a
``ProcessGroupGloo`` each, over one in-memory store) run the exchange, the wrapped core
attention and the loss, compared with the unsharded computation; the refusals; batch
sharding."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from accel_parallel.mesh.sequence_parallel import DeepSpeedSequenceParallelConfig, apply_ulysses
from accel_parallel.mesh.ulysses import (
    UlyssesForward,
    heads_to_seq,
    repeat_kv_heads,
    seq_to_heads,
)
from accel_parallel.mesh.ulysses_data import sequence_parallel_mean, shard_batch, shard_loader
from accel_state import ConfigurationError
from torch.utils.data import DataLoader

TOL = {"atol": 1e-6, "rtol": 1e-5}  # float32: the exchange moves values, only sums reorder


def on_ranks(fn, size: int = 2):
    """``fn(rank, group)`` on ``size`` ranks in threads; their results by rank (an exception
    in any rank is raised here)."""
    store = dist.HashStore()
    results: dict[int, object] = {}

    def run(rank: int) -> None:
        group = dist.ProcessGroupGloo(dist.PrefixStore("ulysses", store), rank, size)
        try:
            results[rank] = fn(rank, group)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            results[rank] = error

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for rank in range(size):
        if isinstance(results.get(rank), BaseException):
            raise results[rank]
    return [results[rank] for rank in range(size)]


def shard(t: torch.Tensor, rank: int, size: int, dim: int = 2) -> torch.Tensor:
    return t.chunk(size, dim=dim)[rank].detach().clone().requires_grad_(t.requires_grad)


def causal(q, k, v):
    """A core that repeats grouped key/value heads itself (as transformers' sdpa does)."""
    repeat = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_the_exchange_trades_the_sequence_split_for_a_head_split_and_back():
    full = torch.randn(2, 4, 8, 3)

    def check(rank, group):
        mine = shard(full, rank, 2).requires_grad_()
        heads = seq_to_heads(mine, group)
        torch.testing.assert_close(heads, full.chunk(2, dim=1)[rank], **TOL)
        back = heads_to_seq(heads, group)
        torch.testing.assert_close(back, mine, **TOL)
        (back * (rank + 1)).sum().backward()  # backward: the inverse exchange, twice
        torch.testing.assert_close(mine.grad, torch.full_like(mine, rank + 1.0))
        return True

    assert on_ranks(check) == [True, True]


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_wrapped_attention_equals_the_unsharded_one_with_gradients(kv_heads):
    torch.manual_seed(0)
    q = torch.randn(2, 4, 8, 6, requires_grad=True)
    k = torch.randn(2, kv_heads, 8, 6, requires_grad=True)
    v = torch.randn(2, kv_heads, 8, 6, requires_grad=True)
    weight = torch.randn(2, 4, 8, 6)
    reference = causal(q, k, v)
    (reference * weight).sum().backward()

    def check(rank, group):
        mine = [shard(t, rank, 2) for t in (q, k, v)]
        out = UlyssesForward(causal, group)(*mine)
        (out * shard(weight, rank, 2)).sum().backward()
        return out.detach(), [t.grad for t in mine]

    outs = on_ranks(check)
    torch.testing.assert_close(torch.cat([o for o, _ in outs], dim=2), reference, **TOL)
    for index, t in enumerate((q, k, v)):
        # each rank's key/value gradient holds only what its sequence shard contributed
        torch.testing.assert_close(torch.cat([g[index] for _, g in outs], dim=2), t.grad, **TOL)


def test_head_counts_that_do_not_divide_are_refused():
    def heads(rank, group):
        q = torch.randn(1, 3, 4, 2)
        with pytest.raises(ConfigurationError, match=r"3 attention heads over sp_size=2.*"
                                                     r"divides the head count"):
            UlyssesForward(causal, group)(q, q, q)
        return True

    assert on_ranks(heads) == [True, True]
    with pytest.raises(ConfigurationError, match=r"sp_size=2 cannot split 3 key/value heads "
                                                 r"for 6 query heads"):
        repeat_kv_heads(torch.randn(1, 3, 4, 2), q_heads=6, sp_size=2)
    assert repeat_kv_heads(torch.randn(1, 1, 4, 2), q_heads=4, sp_size=2).shape[1] == 2


def test_sequence_parallel_mean_is_the_whole_mean_and_its_gradient_the_share():
    # rank 0 counts 3 tokens with loss sum 6, rank 1 counts 1 token with loss sum 2
    def mean(rank, group):
        loss_sum = torch.tensor([6.0, 2.0][rank], requires_grad=True)
        value = sequence_parallel_mean(loss_sum, [3, 1][rank], group)
        value.backward()
        return value.item(), loss_sum.grad.item()

    (v0, g0), (v1, g1) = on_ranks(mean)
    assert v0 == v1 == pytest.approx(8 / 4)
    # the gradient is sp_size / total tokens on each rank: averaged over the 2 ranks by
    # FSDP2, that is 1 / 4 per token, the unsharded mean's
    assert g0 == g1 == pytest.approx(2 / 4)
    none = torch.tensor(0.0)
    assert sequence_parallel_mean(none, 0).item() == 0.0  # no counted token: 0, not nan


def test_batches_are_cut_to_the_ranks_shard_with_global_positions_and_shifted_labels():
    ids = torch.arange(16).view(2, 8)
    labels = ids + 100
    mask = torch.ones(2, 8)
    parts = [shard_batch({"input_ids": ids, "labels": labels, "attention_mask": mask,
                          "meta": "kept"}, rank, 2) for rank in range(2)]
    for rank, part in enumerate(parts):
        cut = slice(4 * rank, 4 * rank + 4)
        assert torch.equal(part["input_ids"], ids[:, cut])
        assert torch.equal(part["labels"], labels[:, cut])
        assert torch.equal(part["position_ids"], torch.arange(8)[cut].expand(2, 4))
        assert part["attention_mask"].shape == (2, 4) and part["meta"] == "kept"
    # shifted over the whole sequence: shard 0's last token predicts shard 1's first
    assert torch.equal(parts[0]["shift_labels"][:, -1], labels[:, 4])
    assert torch.equal(parts[1]["shift_labels"][:, -1], torch.tensor([-100, -100]))
    given = torch.arange(8).flip(0).expand(2, 8)
    assert torch.equal(shard_batch({"input_ids": ids, "position_ids": given}, 1, 2)
                       ["position_ids"], given[:, 4:])


def test_batches_that_cannot_be_sharded_are_refused():
    with pytest.raises(ConfigurationError, match=r"sequence length 7 does not divide by 2.*"
                                                 r"pad_to_multiple_of=2"):
        shard_batch({"input_ids": torch.zeros(1, 7, dtype=torch.long)}, 0, 2)
    with pytest.raises(ConfigurationError, match=r"shards dict batches.*gave a tuple.*collate_fn"):
        shard_batch((torch.zeros(1, 8),), 0, 2)
    with pytest.raises(ConfigurationError, match=r"gave a dict with keys \['x'\]"):
        shard_batch({"x": torch.zeros(1, 8)}, 0, 2)
    with pytest.raises(ConfigurationError, match=r"sp_seq_length=16, sp_seq_length_is_variable="
                                                 r"False\) expects every batch to be 16 tokens "
                                                 r"long, but this one has 8"):
        shard_batch({"input_ids": torch.zeros(1, 8, dtype=torch.long)}, 0, 2, fixed_length=16)
    assert shard_batch({"input_ids": torch.zeros(1, 16)}, 1, 2, 16)["input_ids"].shape == (1, 8)


def test_the_users_loader_is_left_as_it_is():
    rows = [{"input_ids": torch.arange(4)} for _ in range(4)]
    loader = DataLoader(rows, batch_size=2)
    sharded = shard_loader(loader, 1, 2)
    assert sharded is not loader and loader.collate_fn is not sharded.collate_fn
    assert next(iter(loader))["input_ids"].shape == (2, 4)
    assert torch.equal(next(iter(sharded))["input_ids"], torch.tensor([[2, 3], [2, 3]]))
    assert shard_loader(sharded, 1, 2) is sharded and shard_loader(loader, 0, 1) is loader


class _Mesh:
    """What the loader step reads of the mesh: this rank's coordinate and the size of ``sp``."""

    def rank(self, name: str) -> int:
        return 1

    def size(self, name: str) -> int:
        return 2


def test_the_strategy_step_cuts_batches_and_holds_a_fixed_length():
    from accel_parallel import ParallelismConfig
    from accel_parallel.mesh.sequence_parallel import shard_for_sequence_parallel

    rows = [{"input_ids": torch.arange(6)} for _ in range(2)]
    loose = shard_for_sequence_parallel(DataLoader(rows, batch_size=2), _Mesh(),
                                        ParallelismConfig(sp_size=2))
    assert torch.equal(next(iter(loose))["position_ids"], torch.tensor([[3, 4, 5]] * 2))
    fixed = ParallelismConfig(sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig(
        sp_seq_length=8, sp_seq_length_is_variable=False))
    with pytest.raises(ConfigurationError, match=r"to be 8 tokens long, but this one has 6"):
        next(iter(shard_for_sequence_parallel(DataLoader(rows, batch_size=2), _Mesh(), fixed)))
    plain = DataLoader(rows)
    assert shard_for_sequence_parallel(plain, _Mesh(), ParallelismConfig()) is plain


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Module() for _ in range(2)])
        for layer in self.layers:
            layer.core = torch.nn.Identity()


def test_core_attention_is_named_by_patterns_or_the_models_plan():
    group = object()  # not used until a forward
    model = _Model()
    handler = DeepSpeedSequenceParallelConfig(sp_attention_modules=["layers.*.core"])
    assert apply_ulysses(model, group, handler) == ["layers.0.core", "layers.1.core"]
    assert isinstance(model.layers[1].core.forward, UlyssesForward)
    assert [n for n, _ in model.named_parameters()] == []  # nothing renamed or added
    planned = _Model()
    planned._sp_plan = ["layers.1.core"]
    assert apply_ulysses(planned, group) == ["layers.1.core"]
    with pytest.raises(ConfigurationError, match=r"pattern 'blocks\.\*\.attn' matches no "
                                                 r"module of _Model.*layers"):
        apply_ulysses(_Model(), group, DeepSpeedSequenceParallelConfig(
            sp_attention_modules=["blocks.*.attn"]))
    with pytest.raises(ConfigurationError, match=r"which modules of _Model compute attention.*"
                                                 r"sp_attention_modules"):
        apply_ulysses(_Model(), group)
    with pytest.raises(ConfigurationError, match=r"sp_attention_modules='layers'\) must be a list"):
        DeepSpeedSequenceParallelConfig(sp_attention_modules="layers")
