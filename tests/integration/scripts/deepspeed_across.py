"""DeepSpeed ZeRO checkpoints loaded on another number of processes: into models that are not
DeepSpeed engines, and into DeepSpeed engines (accel repartitions the ZeRO state).

The 2-process phases run inside deepspeed_checks.py's launches (``train`` calls
``save_phase``, ``resume`` calls ``load_phase``: no launch of their own); ``one`` runs in
the test's own process between them. The argv form stays for running one phase by hand.

``save ROOT`` (2 processes): for each case of ``CASES`` (ZeRO-2 fp32, ZeRO-1 bf16, ZeRO-3
fp32) an engine with a torch Adam trains 2 steps and saves ``ROOT/<case>``; what the engine
held then (fp32 master weights, ``exp_avg``, ``exp_avg_sq``, ``step``, through DeepSpeed's
``safe_get_full_*``) goes to ``<case>.held.safetensors``, and for the fp32 cases the weights
after a third step to ``<case>.after.safetensors``.
``one ROOT`` (1 process): a plain model loads each case (the state equals what the engine
held); an FSDP2 model loads ``ds``; a 1-process engine of the same stage loads each 2-process
case (accel repartitions it): the state equals what the 2 engines held, and the next step
equals the plain model's from the same state (weights and moments); the ZeRO-2 and ZeRO-3
engines then save ``ROOT/one_<case>`` (1 process) with ``one_<case>.held.safetensors``. A
ZeRO-3 engine prepared without an optimizer loads the weights of ``ds_z3`` (2 processes) and
of ``one_ds_z3`` (1). A ZeRO-0 engine refuses the 2-process ZeRO state, naming why, before
it changes anything; a flipped byte in a partition is named.
``load ROOT`` (2 processes): DDP models load each 2-process case (state equal, next step
equal to the engines'); then 2-process engines load the 1-process ``one_*`` checkpoints:
state equal to what the 1 engine held, the next step equal to DDP's from the same state; a
ZeRO-3 engine without an optimizer loads the weights of ``one_ds_z3``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.utils import DeepSpeedPlugin
from accel_state import ConfigurationError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

#: case -> (ZeRO stage, mixed precision)
CASES = {"ds": (2, "no"), "ds_z1": (1, "bf16"), "ds_z3": (3, "no")}
RESAVED = ("ds", "ds_z3")  # saved again by one process, for 1 -> 2
MOMENTS = ("exp_avg", "exp_avg_sq")


def build(accelerator: Accelerator, seed: int):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))  # 3: ZeRO-3 padding
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = DataLoader(TensorDataset(torch.randn(16, 8)), batch_size=4)  # sets the micro batch
    model, optimizer, scheduler, _ = accelerator.prepare(model, optimizer, scheduler, loader)
    return model, optimizer, scheduler


def engine_accelerator(case: str) -> Accelerator:
    stage, precision = CASES[case]
    return Accelerator(cpu=True, mixed_precision=precision,
                       deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))


def step(accelerator: Accelerator, model, optimizer, scheduler, index: int) -> None:
    """One step on this rank's batch ``index``; the learning rate halves after it (the
    engine steps its scheduler itself: ``scheduler.step()`` is then a no-op)."""
    gen = torch.Generator().manual_seed(10 * index + accelerator.process_index)
    accelerator.backward(model(torch.randn(4, 8, generator=gen)).float().pow(2).mean())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def held(accelerator: Accelerator, model, optimizer) -> dict[str, torch.Tensor]:
    """What the model and its Adam hold, full and in fp32: ``weight/<name>``,
    ``exp_avg/<name>``, ``exp_avg_sq/<name>``, ``step/<name>``, and the learning rate ``lr``
    (the scheduler's; a collective for engines)."""
    out = {"lr": torch.tensor(optimizer.param_groups[0]["lr"], dtype=torch.float64)}
    if type(model).__name__ == "DeepSpeedEngine":
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

        steps = [s["step"] for s in model.optimizer.optimizer.state.values()]
        for name, param in model.module.named_parameters():
            out[f"weight/{name}"] = safe_get_full_fp32_param(param).detach().cpu().clone()
            for key in MOMENTS:
                out[f"{key}/{name}"] = safe_get_full_optimizer_state(param, key).cpu().clone()
            out[f"step/{name}"] = torch.as_tensor(steps[0], dtype=torch.float32).clone()
        return out
    for name, param in accelerator.unwrap_model(model).named_parameters():
        state = optimizer.state[param]
        out[f"weight/{name}"] = param.detach().float().clone()
        out.update({f"{key}/{name}": state[key].clone() for key in MOMENTS})
        out[f"step/{name}"] = torch.as_tensor(state["step"], dtype=torch.float32).clone()
    return out


def same(got: dict, want: dict, exact: bool = True) -> bool:
    """``got`` equal to ``want`` (``exact``), or within the reduction order's rounding."""
    if got.keys() != want.keys():
        return False
    if exact:
        return all(torch.equal(got[k], want[k]) for k in want)
    return all(torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6) for k in want)


def weights_of(state: dict) -> dict:
    return {k: v for k, v in state.items() if k.startswith("weight/")}


def trained(state: dict) -> dict:
    """All but the learning rate after a step: on 2 processes Accelerate's scheduler steps
    once per process (``num_processes`` times per step), DeepSpeed's engine once."""
    return {k: v for k, v in state.items() if k != "lr"}


def evaluation_engine(root: Path, checkpoint: str) -> str:
    """A ZeRO-3 engine prepared without an optimizer loads ``checkpoint`` (the weights alone:
    accel writes them through GatheredParameters at any number of processes); rank 0 says
    whether its gathered weights equal what the saving engine held."""
    accelerator = engine_accelerator("ds_z3")
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    loader = DataLoader(TensorDataset(torch.randn(16, 8)), batch_size=4)
    model, _ = accelerator.prepare(model, loader)
    accelerator.load_state(root / checkpoint)
    got = accelerator.get_state_dict(model)  # gathered on rank 0
    want = load_file(root / f"{checkpoint}.held.safetensors")
    equal = all(torch.equal(got[k], want[f"weight/{k}"]) for k in got) and len(got) == 4
    return str(equal) if accelerator.is_main_process else "rank0"


def save_phase(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for case, (_, precision) in CASES.items():
        accelerator = engine_accelerator(case)
        model, optimizer, scheduler = build(accelerator, seed=0)
        for index in range(2):
            step(accelerator, model, optimizer, scheduler, index)
        accelerator.save_state(root / case)
        at_save = held(accelerator, model, optimizer)
        if precision == "no":
            step(accelerator, model, optimizer, scheduler, 2)
            after = weights_of(held(accelerator, model, optimizer))
            if accelerator.is_main_process:
                save_file(after, root / f"{case}.after.safetensors")
        if accelerator.is_main_process:
            save_file(at_save, root / f"{case}.held.safetensors")
    print(f"DS-SAVED rank={accelerator.process_index}", flush=True)


def load_phase(root: Path) -> None:
    """2 processes: DDP from the 2-process cases; engines from the 1-process ones."""
    for case, (_, precision) in CASES.items():
        accelerator = Accelerator(cpu=True)
        model, optimizer, scheduler = build(accelerator, seed=1)
        accelerator.load_state(root / case)
        want = load_file(root / f"{case}.held.safetensors")
        state = same(held(accelerator, model, optimizer), want)
        following = "skipped"  # bf16: the engine's steps are not fp32 DDP's
        if precision == "no":
            step(accelerator, model, optimizer, scheduler, 2)
            following = same(weights_of(held(accelerator, model, optimizer)),
                             load_file(root / f"{case}.after.safetensors"), exact=False)
        print(f"DS-INTO-DDP {case} rank={accelerator.process_index} state={state} "
              f"next={following} engine={type(model).__name__}", flush=True)
    for case in RESAVED:
        saved = root / f"one_{case}"
        ddp = Accelerator(cpu=True)
        reference, reference_optimizer, reference_scheduler = build(ddp, seed=1)
        ddp.load_state(saved)
        step(ddp, reference, reference_optimizer, reference_scheduler, 4)
        want = held(ddp, reference, reference_optimizer)
        accelerator = engine_accelerator(case)
        model, optimizer, scheduler = build(accelerator, seed=1)
        accelerator.load_state(saved)
        state = same(held(accelerator, model, optimizer),
                     load_file(root / f"one_{case}.held.safetensors"))
        counters = (model.global_steps, model.lr_scheduler.last_epoch,
                    model.optimizer.loss_scaler.cur_scale) == (3, 3, 1.0)
        step(accelerator, model, optimizer, scheduler, 4)
        following = same(trained(held(accelerator, model, optimizer)), trained(want),
                         exact=False)
        print(f"DS-1-TO-2 {case} rank={accelerator.process_index} state={state} "
              f"counters={counters} next={following}", flush=True)
    print(f"DS-EVAL-1-TO-2 equal={evaluation_engine(root, 'one_ds_z3')}", flush=True)


def one_phase(root: Path) -> None:
    """1 process: a plain model and FSDP2 from the 2-process cases; 1-process engines
    repartition them; the resaved 1-process checkpoints; a ZeRO-0 engine's refusal."""
    references = {}
    for case, (_, precision) in CASES.items():
        plain = Accelerator(cpu=True)
        model, optimizer, scheduler = build(plain, seed=2)
        plain.load_state(root / case)
        want = load_file(root / f"{case}.held.safetensors")
        print(f"DS-INTO-PLAIN {case} state={same(held(plain, model, optimizer), want)}",
              flush=True)
        if precision == "no":
            step(plain, model, optimizer, scheduler, 3)
            references[case] = held(plain, model, optimizer)
    for case, (_, precision) in CASES.items():
        accelerator = engine_accelerator(case)
        model, optimizer, scheduler = build(accelerator, seed=3)
        accelerator.load_state(root / case)
        want = load_file(root / f"{case}.held.safetensors")
        state = same(held(accelerator, model, optimizer), want)
        lp = all(torch.equal(p.detach(), want[f"weight/{n}"].to(p.dtype))
                 for n, p in model.module.named_parameters()) if CASES[case][0] < 3 else True
        counters = (model.global_steps, model.lr_scheduler.last_epoch) == (2, 2)
        following = "skipped"
        if precision == "no":
            step(accelerator, model, optimizer, scheduler, 3)
            following = same(held(accelerator, model, optimizer), references[case], exact=False)
        print(f"DS-2-TO-1 {case} state={state} model={lp} counters={counters} "
              f"next={following}", flush=True)
        if case in RESAVED:
            accelerator.save_state(root / f"one_{case}")
            save_file(held(accelerator, model, optimizer), root / f"one_{case}.held.safetensors")
    print(f"DS-EVAL-2-TO-1 equal={evaluation_engine(root, 'ds_z3')} "
          f"same={evaluation_engine(root, 'one_ds_z3')}", flush=True)
    refusals(root)
    fsdp = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    model, optimizer, scheduler = build(fsdp, seed=4)
    fsdp.load_state(root / "ds")  # FSDP2 over one process: the full state cut into shards
    sharded = isinstance(next(model.parameters()), DTensor)
    want = load_file(root / "ds.held.safetensors")
    equal = all(torch.equal(v.full_tensor() if isinstance(v, DTensor) else v,
                            want[f"weight/{k}"]) for k, v in model.state_dict().items())
    print(f"DS-INTO-FSDP sharded={sharded} equal={equal}", flush=True)


def refusals(root: Path) -> None:
    """A ZeRO-0 engine keeps no partitions to cut ZeRO state into: refused, unchanged. A
    flipped byte in a partition is named before a 1-process engine repartitions anything."""
    import shutil

    from accel_checkpoint.errors import CorruptCheckpointError

    accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=0))
    model, _, _ = build(accelerator, seed=5)
    before = {k: v.clone() for k, v in model.module.state_dict().items()}
    try:
        accelerator.load_state(root / "ds")
        print("DS-ZERO0-ACCEPTED", flush=True)
    except ConfigurationError as exc:
        unchanged = all(torch.equal(v, before[k]) for k, v in model.module.state_dict().items())
        named = ("partitioned over 2 process(es), but this run has 1" in str(exc)
                 and "ZeRO stage 0" in str(exc) and "--num_processes 2" in str(exc))
        print(f"DS-ZERO0-REFUSED named={named} unchanged={unchanged}", flush=True)
    broken = root / "ds_broken"
    shutil.copytree(root / "ds", broken)
    shard = broken / "deepspeed" / "model" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    accelerator = engine_accelerator("ds")
    model, _, _ = build(accelerator, seed=5)
    try:
        accelerator.load_state(broken)
        print("DS-CORRUPT-ACCEPTED", flush=True)
    except CorruptCheckpointError as exc:
        print(f"DS-CORRUPT-REFUSED named={shard.name in str(exc)}", flush=True)


if __name__ == "__main__":
    phases = {"save": save_phase, "load": load_phase, "one": one_phase}
    phases[sys.argv[1]](Path(sys.argv[2]))
