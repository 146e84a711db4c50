"""DeepSpeed through the unchanged facade, in 2 processes (gloo): many checks per launch.

``train OUT``: ZeRO-1/2/3 in fp32 and bf16 against DDP (same seeded model and data; the
gathered bf16 state dict stays bf16); the plain-dict spelling with accumulation 4 against
DDP with accumulation 4 (one engine and scheduler step per 4 batches, ``no_sync`` a no-op);
a JSON with "auto" values (resolved config asserted, DummyOptim/DummyScheduler); the
getting-started loop as written (float batches into a bf16 engine, dict and JSON); ZeRO-2
with optimizer offload; ZeRO-3 with ``zero3_init_flag`` (through
``accelerator.state.deepspeed_plugin``), ``get_state_dict``, ``save_model``, a checkpoint
round trip and rotation (``total_limit``); then the first half of save -> kill -> resume:
ZeRO-2 saves after 3 steps, trains on to the end (the straight run, written to
OUT/straight.pt), then saves again and rank 1 is SIGKILLed once its files are in that
save's staging folder (``KILLING 0 rank=1``: the launch fails, nothing is committed, and
the resume launch's load must clean the folder). Before that save, the ZeRO-1/2/3
checkpoints of ``deepspeed_across.py save`` (OUT/across).

``cpu_adam OUT`` (slow): ZeRO-2 optimizer offload with a torch AdamW, turned into
DeepSpeed's CPU Adam (compiles cpu_adam), against DDP.

``resume OUT``: first ``deepspeed_across.py load`` (OUT/across into DDP, and the
1-process checkpoints its ``one`` phase wrote into 2 engines); then fresh
processes load the newest checkpoint (DeepSpeed's pickles read with
an allow-list: no ``trust_pickles``), train the remaining steps and must end equal to the
straight run; a flipped byte in a rank's DeepSpeed shard is named.
Each check prints ``<NAME>-OK rank=<r>``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

import deepspeed_across  # this folder: the script's own, first on sys.path
import torch
from accel import Accelerator
from accel.utils import (
    DataLoaderConfiguration,
    DeepSpeedPlugin,
    DummyOptim,
    DummyScheduler,
    ProjectConfiguration,
)
from checkpoint_per_rank_crash import kill_after_writing
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS = 4
BATCH = 4  # per process


class Net(nn.Module):
    """A model that declares its hidden size, as transformers models do (config.hidden_size)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Config", (), {"hidden_size": 16})()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


def fresh() -> Net:
    torch.manual_seed(0)
    return Net()


def train(accelerator: Accelerator, model: nn.Module, optimizer, loader, steps: int = STEPS,
          scheduler=None, save_at: int | None = None, after_save=None) -> int:
    """``steps`` optimizer steps; ``save_at``: ``save_state()`` after that many (one
    iteration of the loader throughout, as a resumed run continues it)."""
    done = 0
    while done < steps:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                dtype = next(p for p in model.parameters()).dtype
                out = model(xb.to(dtype))
                loss = nn.functional.mse_loss(out.float(), yb)
                accelerator.backward(loss)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                optimizer.zero_grad()
            done += accelerator.sync_gradients
            if accelerator.sync_gradients and done == save_at:
                accelerator.save_state()
                if after_save is not None:
                    after_save()
            if done == steps:
                return done
    return done


def weights(accelerator: Accelerator, model: nn.Module) -> dict[str, torch.Tensor]:
    state = accelerator.get_state_dict(model)
    return {k: v.float().clone() for k, v in state.items()}


def ddp_run(accumulation: int = 1) -> dict[str, torch.Tensor]:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulation)
    model = fresh()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(data(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    train(accelerator, model, optimizer, loader)
    return {k: v.float().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}


def ds_run(plugin, mixed_precision: str = "no", accumulation: int = 1,
           constant_scheduler: bool = False):
    """``constant_scheduler``: with a LambdaLR of factor 1 (the weights stay DDP's), to count
    how often the engine steps it."""
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision,
                              gradient_accumulation_steps=accumulation, deepspeed_plugin=plugin)
    model = fresh()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(data(), batch_size=BATCH)
    if constant_scheduler:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler,
                                                                  loader)
    else:
        scheduler = None
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert type(model).__name__ == "DeepSpeedEngine", type(model)
    train(accelerator, model, optimizer, loader, scheduler=scheduler)
    return accelerator, model


def close(got: dict, want: dict, atol: float, what: str) -> None:
    rank = torch.distributed.get_rank()
    if rank != 0:
        assert got == {}, f"{what}: rank {rank} got weights"
        return
    assert got.keys() == want.keys(), (what, got.keys(), want.keys())
    for key in want:
        diff = (got[key] - want[key]).abs().max().item()
        assert diff <= atol, f"{what}: {key} differs from DDP by {diff} (> {atol})"


def check_zero_stages(rank: int, reference: dict) -> None:
    for stage in (1, 2, 3):
        for precision, atol in (("no", 2e-5), ("bf16", 6e-2)):
            accelerator, model = ds_run(DeepSpeedPlugin(zero_stage=stage), precision)
            config = accelerator.strategy.configs["default"]
            assert config["zero_optimization"]["stage"] == stage
            assert config["bf16"]["enabled"] == (precision == "bf16"), config
            state = accelerator.get_state_dict(model)  # ZeRO-3: gathered, 16-bit in bf16
            if precision == "bf16":
                assert next(accelerator.unwrap_model(model).parameters()).dtype == torch.bfloat16
                assert all(v.dtype == torch.bfloat16 for v in state.values()), state
            close({k: v.float() for k, v in state.items()}, reference, atol,
                  f"ZeRO-{stage} {precision}")
    print(f"ZERO-STAGES-OK rank={rank}", flush=True)


def check_accumulation(rank: int) -> None:
    reference = ddp_run(accumulation=4)
    # the plain-dict spelling: its accumulation count becomes the Accelerator's
    accelerator, model = ds_run({"zero_stage": 2, "offload_optimizer": False,
                                 "gradient_accumulation_steps": 4}, constant_scheduler=True)
    assert accelerator.gradient_accumulation_steps == 4
    config = accelerator.strategy.configs["default"]
    assert (config["gradient_accumulation_steps"], config["train_micro_batch_size_per_gpu"],
            config["train_batch_size"]) == (4, BATCH, BATCH * 4 * 2), config
    assert model.global_steps == STEPS, model.global_steps  # one engine step per 4 batches
    # the scheduler too: stepped by the engine at each boundary, scheduler.step() a no-op
    assert model.lr_scheduler.last_epoch == STEPS, model.lr_scheduler.last_epoch
    with accelerator.no_sync(model):  # a no-op (DeepSpeed's own no_sync refuses ZeRO-2)
        pass
    close(weights(accelerator, model), reference, 2e-5, "accumulation 4")
    print(f"ACCUMULATION-OK rank={rank}", flush=True)


def check_offload(rank: int, reference: dict) -> None:
    plugin = DeepSpeedPlugin(hf_ds_config={
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
        "zero_force_ds_cpu_optimizer": False, "train_micro_batch_size_per_gpu": "auto",
        "gradient_clipping": "auto"})  # "auto": no clipping (DeepSpeed alone clips at 1.0)
    accelerator, model = ds_run(plugin)
    assert type(model.optimizer).__name__ == "DeepSpeedZeroOptimizer"
    assert model.optimizer.cpu_offload
    close(weights(accelerator, model), reference, 2e-5, "ZeRO-2 optimizer offload")
    print(f"OFFLOAD-OK rank={rank}", flush=True)


def check_auto_config(rank: int) -> None:
    auto_json = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto",
                                                  "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
                                                     "warmup_max_lr": "auto",
                                                     "warmup_num_steps": "auto"}},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=2,
                              deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=auto_json,
                                                               gradient_clipping=0.5))
    model = fresh()
    optimizer = DummyOptim(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = DummyScheduler(optimizer, warmup_num_steps=5)
    loader = DataLoader(data(), batch_size=BATCH)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    config = accelerator.strategy.configs["default"]
    assert config["train_micro_batch_size_per_gpu"] == BATCH
    assert config["gradient_accumulation_steps"] == 2
    assert config["train_batch_size"] == BATCH * 2 * 2
    assert config["gradient_clipping"] == 0.5
    assert config["bf16"]["enabled"] is True
    assert config["optimizer"]["params"] == {"lr": 3e-3, "weight_decay": 0.01, "torch_adam": True}
    assert config["scheduler"]["params"] == {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3,
                                             "warmup_num_steps": 5}, config["scheduler"]
    assert config["zero_optimization"]["reduce_bucket_size"] == 16 * 16
    train(accelerator, model, optimizer, loader, steps=2, scheduler=scheduler)
    assert model.global_steps == 2
    # WarmupLR: two engine steps of a 5-step warm-up
    assert 0 < scheduler.get_last_lr()[0] < 3e-3, scheduler.get_last_lr()
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
    assert norm is not None and norm >= 0
    print(f"AUTO-CONFIG-OK rank={rank}", flush=True)


def seed_loop(accelerator: Accelerator) -> tuple[list[float], nn.Module]:
    """Getting-started's loop as a user writes it for DDP: a Linear model, float32 batches,
    no cast anywhere; the losses of each epoch's last batch."""
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(data(), batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(4):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach().float(), reduction="mean").item())
    return losses, model


def same_on_every_rank(model: nn.Module, what: str) -> None:
    for name, param in model.module.named_parameters():  # ZeRO-2: every rank holds them all
        first = param.detach().float().clone()
        torch.distributed.broadcast(first, src=0)
        assert torch.equal(first, param.detach().float()), f"{what}: {name} differs across ranks"


def check_seed_workflow(rank: int, out: Path) -> None:
    """"ZeRO-2 with a plain dict", as written: bf16 from mixed_precision=, float inputs cast
    for the engine (integer ones left alone), the state telling the truth; then the same
    through a DeepSpeed JSON with bf16 enabled, as `accel launch --config_file ds.json` hands
    it to a plain Accelerator()."""
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin={
        "zero_stage": 2, "offload_optimizer": False, "gradient_accumulation_steps": 4})
    assert (accelerator.mixed_precision, accelerator.state.mixed_precision) == ("bf16", "bf16")
    assert accelerator.native_amp is False  # the engine holds bf16 weights; no autocast
    losses, model = seed_loop(accelerator)
    assert accelerator.mixed_precision == "bf16" and model.bfloat16_enabled()
    assert losses[-1] < losses[0], losses
    same_on_every_rank(model, "plain dict")
    with accelerator.autocast():  # a no-op under DeepSpeed, as in Accelerate
        assert not torch.is_autocast_enabled("cpu")
    ids = torch.tensor([[1, 2, 3]])
    seen = []
    model.module.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    with contextlib.suppress(RuntimeError):  # an int batch into Linear: only the dtype matters
        model(ids)
    assert seen[-1] == torch.int64, seen
    json_path = out / "ds_bf16.json"
    if rank == 0:
        json_path.write_text(json.dumps({
            "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
            "gradient_accumulation_steps": 1, "train_micro_batch_size_per_gpu": "auto",
            "train_batch_size": "auto", "gradient_clipping": 1.0}))
    torch.distributed.barrier()
    os.environ.update(ACCELERATE_USE_DEEPSPEED="true",
                      ACCELERATE_DEEPSPEED_CONFIG_FILE=str(json_path))
    try:
        accelerator = Accelerator()
        assert (accelerator.mixed_precision, accelerator.state.mixed_precision) == ("bf16",
                                                                                    "bf16")
        losses, model = seed_loop(accelerator)
    finally:
        for key in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
            os.environ.pop(key)
    assert model.bfloat16_enabled() and losses[-1] < losses[0], losses
    same_on_every_rank(model, "JSON")
    print(f"SEED-WORKFLOW-OK rank={rank}", flush=True)


def check_zero3_init(rank: int, out: Path) -> None:
    plugin = DeepSpeedPlugin(zero_stage=3, zero3_init_flag=True)
    project = ProjectConfiguration(str(out / "zero3"), automatic_checkpoint_naming=True,
                                   total_limit=2)
    accelerator = Accelerator(cpu=True, deepspeed_plugin=plugin, project_config=project)
    # Accelerate's spelling of the same context
    with accelerator.state.deepspeed_plugin.zero3_init_context_manager():
        torch.manual_seed(0)
        model = Net()
    assert all(hasattr(p, "ds_id") and p.numel() == 0 for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(data(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    train(accelerator, model, optimizer, loader, steps=2)
    state = accelerator.get_state_dict(model)
    if rank == 0:
        assert state["body.0.weight"].shape == (16, 8), state["body.0.weight"].shape
    accelerator.save_model(model, out / "zero3_model")
    accelerator.wait_for_everyone()
    from safetensors.torch import load_file

    saved = load_file(str(out / "zero3_model" / "model.safetensors"))
    assert saved["body.2.weight"].shape == (1, 16)
    # a ZeRO-3 checkpoint round trip: train on, load, the weights are the saved ones again
    path = accelerator.save_state()
    at_save = weights(accelerator, model)
    train(accelerator, model, optimizer, loader, steps=1)
    accelerator.load_state(path)
    again = weights(accelerator, model)
    if rank == 0:
        assert all(torch.equal(at_save[k], again[k]) for k in at_save), "ZeRO-3 reload differs"
    # rotation after each commit: total_limit=2 keeps the two newest, no staging left over
    accelerator.save_state()
    accelerator.save_state()
    accelerator.wait_for_everyone()
    kept = sorted(p.name for p in (out / "zero3" / "checkpoints").iterdir())
    assert kept == ["checkpoint_1", "checkpoint_2"], kept
    for name in kept:
        manifest = json.loads((out / "zero3" / "checkpoints" / name / "manifest.json").read_text())
        assert manifest["layout"] == "deepspeed", manifest["layout"]
    print(f"ZERO3-INIT-OK rank={rank}", flush=True)


def check_cpu_adam(rank: int, reference: dict) -> None:
    """Optimizer offload with a torch AdamW: it becomes DeepSpeedCPUAdam (compiles cpu_adam)."""
    accelerator, model = ds_run({"zero_stage": 2, "offload_optimizer": True})
    assert type(model.optimizer.optimizer).__name__ == "DeepSpeedCPUAdam"
    close(weights(accelerator, model), reference, 1e-4, "ZeRO-2 offload with DeepSpeedCPUAdam")
    print(f"CPU-ADAM-OK rank={rank}", flush=True)


def checkpoint_accelerator(out: Path):
    accelerator = Accelerator(
        cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2),
        project_config=ProjectConfiguration(str(out / "run"), automatic_checkpoint_naming=True),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True,
                                                  exact_resume=True))  # mid-epoch position
    model = fresh()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = DataLoader(data(), batch_size=BATCH, shuffle=True)
    return (accelerator, *accelerator.prepare(model, optimizer, scheduler, loader))


def check_save(rank: int, out: Path) -> None:
    accelerator, model, optimizer, scheduler, loader = checkpoint_accelerator(out)
    def keep_saved_weights() -> None:  # for `accel merge-weights` of the checkpoint
        saved = weights(accelerator, model)
        if rank == 0:
            torch.save(saved, out / "at_save.pt")

    train(accelerator, model, optimizer, loader, steps=8, scheduler=scheduler, save_at=3,
          after_save=keep_saved_weights)
    path = out / "run" / "checkpoints" / "checkpoint_0"
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["layout"] == "deepspeed", manifest["layout"]
    listed = set(manifest["files"])
    for r in (0, 1):
        assert f"deepspeed/model/zero_pp_rank_{r}_mp_rank_00_optim_states.pt" in listed, listed
    assert "deepspeed/model/mp_rank_00_model_states.pt" in listed
    final = weights(accelerator, model)
    if rank == 0:
        torch.save(final, out / "straight.pt")
    accelerator.wait_for_everyone()
    print(f"SAVE-OK rank={rank}", flush=True)
    # a save killed mid-write: rank 1 dies with its DeepSpeed files in the staging folder
    if rank == 1:
        kill_after_writing(rank)
    accelerator.save_state()
    raise AssertionError(f"rank {rank}: the save whose rank 1 was killed returned")


def check_resume(rank: int, out: Path) -> None:
    from accel_checkpoint.errors import CorruptCheckpointError

    accelerator, model, optimizer, scheduler, loader = checkpoint_accelerator(out)
    # DeepSpeed's .pt files are read with weights_only=True and an allow-list: no opt-in
    manifest = json.loads((out / "run" / "checkpoints" / "checkpoint_0" / "manifest.json")
                          .read_text())
    assert manifest["metadata"]["unpickles"] == "restricted", manifest["metadata"]
    accelerator.load_state()
    assert accelerator.unwrap_model(model) is model.module
    train(accelerator, model, optimizer, loader, steps=5, scheduler=scheduler)
    final = weights(accelerator, model)
    if rank == 0:
        straight = torch.load(out / "straight.pt")
        for key in straight:
            assert torch.equal(final[key], straight[key]), f"resume differs at {key}"
    print(f"RESUME-OK rank={rank}", flush=True)
    # a flipped byte in rank 1's shard is named by load_state, on every rank
    source = out / "run" / "checkpoints" / "checkpoint_0"
    broken = out / "broken"
    if rank == 0:
        shutil.copytree(source, broken)
        shard = broken / "deepspeed" / "model" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        shard.write_bytes(bytes(raw))
    accelerator.wait_for_everyone()
    try:
        accelerator.load_state(str(broken))
    except CorruptCheckpointError as error:
        assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in str(error), error
    else:
        raise AssertionError("a corrupt DeepSpeed shard was loaded")
    print(f"CORRUPT-OK rank={rank}", flush=True)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    if mode == "train":
        reference = ddp_run()
        check_zero_stages(rank, reference)
        check_accumulation(rank)
        check_offload(rank, reference)
        check_auto_config(rank)
        check_seed_workflow(rank, out)
        check_zero3_init(rank, out)
        deepspeed_across.save_phase(out / "across")
        check_save(rank, out)  # ends in a SIGKILLed save: no end_training, no cleanup
    elif mode == "resume":
        deepspeed_across.load_phase(out / "across")  # DDP first, in fresh processes
        check_resume(rank, out)
    elif mode == "cpu_adam":
        check_cpu_adam(rank, ddp_run())


if __name__ == "__main__":
    main()
