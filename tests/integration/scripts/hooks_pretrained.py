"""A training script shaped like diffusers' examples, run unchanged on accel.

Its model saves itself (``save_pretrained`` / ``from_pretrained``, a folder with a config
and safetensors weights), and the script registers the hooks diffusers' examples register:
the save hook writes each model it is handed into ``output_dir/unet`` on the main process
and pops the weights (so the Accelerator does not save them again), the load hook pops
each model and loads it from that folder. It checkpoints on the main process only (on
every rank under DeepSpeed, as diffusers does), and on resume it skips the batches of the
resumed epoch that it has already seen itself, as diffusers does: so the loader must not
also restore its mid-epoch position (Accelerate's default).

``--out DIR --steps N --checkpointing_steps K [--stop_after S] [--resume]``; prints one
``update STEP loss`` line per optimizer update and ``final DIGEST`` at the end (rank 0).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from pathlib import Path

import torch
from accel import Accelerator, DistributedType
from safetensors.torch import load_file, save_file


class TinyUNet(torch.nn.Module):
    """A model that, like diffusers' models, saves and loads itself."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.config = {"width": width}
        self.inner = torch.nn.Linear(4, width)
        self.outer = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(torch.tanh(self.inner(x)))

    def save_pretrained(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        Path(folder, "config.json").write_text(json.dumps(self.config))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  os.path.join(folder, "diffusion_pytorch_model.safetensors"))

    @classmethod
    def from_pretrained(cls, path: str, subfolder: str = "") -> TinyUNet:
        folder = Path(path, subfolder)
        model = cls(**json.loads((folder / "config.json").read_text()))
        model.load_state_dict(load_file(folder / "diffusion_pytorch_model.safetensors"))
        return model


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, value in sorted(state.items()):
        h.update(name.encode())
        h.update(value.detach().to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpointing_steps", type=int, default=2)
    parser.add_argument("--stop_after", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    args = parser.parse_args()

    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    torch.manual_seed(0)
    model = TinyUNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.arange(96, dtype=torch.float32).reshape(24, 4) / 96
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=False)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader,
                                                              scheduler)

    handed: list[str] = []

    def save_model_hook(models, weights, output_dir):
        handed.extend(type(m).__name__ for m in models)
        # FSDP2 hands its sharded modules (weights == []): the script leaves them to accel
        if accelerator.is_main_process and accelerator.distributed_type != DistributedType.FSDP:
            for m in models:  # a DeepSpeed engine answers save_pretrained from its module
                m.save_pretrained(os.path.join(output_dir, "unet"))
                if weights:  # [] where the strategy saves the model itself (DeepSpeed)
                    weights.pop()

    def load_model_hook(models, input_dir):
        handed.extend(type(m).__name__ for m in models)
        for _ in range(len(models)):
            m = models.pop()
            loaded = TinyUNet.from_pretrained(input_dir, subfolder="unet")
            m.load_state_dict(loaded.state_dict())

    accelerator.register_save_state_pre_hook(save_model_hook)
    accelerator.register_load_state_pre_hook(load_model_hook)

    updates_per_epoch = math.ceil(len(loader) / args.gradient_accumulation_steps)
    epochs = math.ceil(args.steps / updates_per_epoch)
    global_step = first_epoch = resume_step = 0
    if args.resume:
        found = sorted(p for p in os.listdir(args.out) if p.startswith("checkpoint-"))
        path = max(found, key=lambda p: int(p.split("-")[1]))
        accelerator.load_state(os.path.join(args.out, path))
        global_step = int(path.split("-")[1])
        first_epoch = global_step // updates_per_epoch
        resume_step = (global_step * args.gradient_accumulation_steps) % (
            updates_per_epoch * args.gradient_accumulation_steps)
        accelerator.print(f"resumed {path} hooks={handed}")

    for epoch in range(first_epoch, epochs):
        model.train()
        for step, batch in enumerate(loader):
            if args.resume and epoch == first_epoch and step < resume_step:
                continue  # the script skips what it has seen itself, as diffusers does
            noise = torch.randn(batch.shape, generator=torch.Generator().manual_seed(
                1000 * epoch + 10 * step + accelerator.process_index))
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(batch + noise), noise)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_step += 1
                accelerator.print(f"update {global_step} epoch {epoch} batch {step}")
                save_now = global_step % args.checkpointing_steps == 0
                collective = accelerator.distributed_type in (DistributedType.DEEPSPEED,
                                                              DistributedType.FSDP)
                if save_now and (collective or accelerator.is_main_process):
                    accelerator.save_state(os.path.join(args.out, f"checkpoint-{global_step}"))
                    accelerator.print(f"saved checkpoint-{global_step} hooks={handed}")
                if global_step == args.stop_after or global_step >= args.steps:
                    break
        if global_step == args.stop_after or global_step >= args.steps:
            break
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(model)  # every rank: a collective under FSDP2
    accelerator.print(f"final {digest(state)} at {global_step}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
