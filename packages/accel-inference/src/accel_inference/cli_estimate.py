"""``accel estimate-memory MODEL``: memory to load a model per dtype and, with ``--training``,
to train it (per process, under DDP / FSDP / ZeRO), optionally checked against a real step.

Registered through the ``accel.cli`` entry-point group. Registering and ``--help`` import
nothing heavy; the handler imports torch and builds the model on ``meta`` (no memory, no
download). Accelerate's flags (``--library_name``, ``--dtypes``, ``--trust_remote_code``)
work as there; the training flags are accel's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

__all__ = ["register", "estimate_command", "run_calibration"]

_DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")
_OPTIMIZERS = ("adam", "adamw", "adam8bit", "sgd", "sgd_momentum")
_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


def run_calibration(args: argparse.Namespace) -> int:
    """Peak RSS growth of two real training steps, measured in a fresh process."""
    command = [sys.executable, "-m", "accel_inference.calibrate", args.model_name,
               "--optimizer", args.optimizer, "--mixed_precision", args.mixed_precision,
               "--batch_size", str(args.batch_size), "--seq_len", str(args.seq_len)]
    if args.library_name:
        command += ["--library_name", args.library_name]
    if args.trust_remote_code:
        command.append("--trust_remote_code")
    # glibc keeps freed mid-size blocks mapped once its mmap threshold adapts upwards, which
    # would add allocator retention to the peak: a fixed threshold measures live tensors.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        from accel_state.errors import ConfigurationError

        raise ConfigurationError(f"--calibrate: the training step of {args.model_name!r} "
                                 f"failed: "
                                 f"{result.stderr.strip().splitlines()[-1:]}")
    return int(json.loads(result.stdout.strip().splitlines()[-1])["measured_peak"])


def estimate_command(args: argparse.Namespace) -> int:
    """Build the model on meta, estimate, print a table or JSON."""
    from accel_inference.estimate import TrainingSetup, estimate_training, estimate_weights
    from accel_inference.model_specs import build_model

    model = build_model(args.model_name, args.library_name, args.trust_remote_code, empty=True)
    report: dict[str, Any] = {"model": args.model_name,
                              "weights": estimate_weights(model, args.dtypes)}
    if args.training or args.calibrate:
        setup = TrainingSetup(optimizer=args.optimizer, mixed_precision=args.mixed_precision,
                              batch_size=args.batch_size, seq_len=args.seq_len,
                              num_processes=args.num_processes,
                              strategy=args.strategy if args.num_processes > 1 else "none")
        estimate = estimate_training(model, setup)
        report["training"] = {"optimizer": setup.optimizer, "strategy": setup.strategy,
                              "num_processes": setup.num_processes,
                              "mixed_precision": setup.mixed_precision,
                              "batch_size": setup.batch_size, "seq_len": setup.seq_len,
                              **estimate.as_dict()}
        if args.calibrate:
            single = estimate_training(model, TrainingSetup(
                optimizer=setup.optimizer, mixed_precision=setup.mixed_precision,
                batch_size=setup.batch_size, seq_len=setup.seq_len, strategy="none"))
            measured = run_calibration(args)
            report["calibration"] = {"estimated_peak": single.peak, "measured_peak": measured,
                                     "ratio": round(single.peak / measured, 3)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    return 0


def _print_table(report: dict[str, Any]) -> None:
    print(f"Memory usage for loading {report['model']!r}")
    print(f"{'dtype':<10}{'Largest layer':>16}{'Total size':>16}{'Parameters':>14}")
    for row in report["weights"]:
        print(f"{row['dtype']:<10}{_size(row['largest_layer']):>16}"
              f"{_size(row['total_size']):>16}{row['parameters']:>14,}")
    training = report.get("training")
    if training:
        print()
        print(f"Training, per process ({training['optimizer']}, mixed precision "
              f"{training['mixed_precision']}, batch {training['batch_size']} x seq "
              f"{training['seq_len']}, {training['num_processes']} process(es), strategy "
              f"{training['strategy']})")
        for key in ("weights", "gradients", "optimizer_states", "step_temporaries",
                    "activations", "backward_working", "gathered_layer",
                    "replication_buffers", "peak"):
            print(f"  {key.replace('_', ' '):<22}{_size(training[key]):>14}")
    calibration = report.get("calibration")
    if calibration:
        print()
        print(f"Calibration (one process, CPU): estimated {_size(calibration['estimated_peak'])}"
              f", measured {_size(calibration['measured_peak'])} "
              f"(estimate/measured = {calibration['ratio']:.2f})")


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``accel estimate-memory``."""
    parser = subparsers.add_parser(
        "estimate-memory", help="Estimate the memory to load and train a model (no download).",
        description="Build MODEL on the meta device (no memory, no download) and print its "
        "size per dtype; with --training, the peak memory of one training process. MODEL is "
        "'module:factory' or 'file.py:factory', a local folder with a transformers "
        "config.json (needs transformers), or a timm name with --library_name timm.")
    parser.add_argument("model_name", metavar="MODEL",  # Accelerate's dest (gather_data)
                        help="module:factory, file.py:factory, a folder, or a name")
    parser.add_argument("--library_name", choices=("transformers", "timm"), default=None,
                        help="library that builds MODEL from a name or folder")
    parser.add_argument("--dtypes", nargs="+", choices=_DTYPES,
                        default=["float32", "float16", "int8", "int4"],
                        help="dtypes to size the weights in")
    parser.add_argument("--trust_remote_code", action="store_true",
                        help="let transformers run the model's own code from its folder")
    group = parser.add_argument_group("training (beyond Accelerate)")
    group.add_argument("--training", action="store_true",
                       help="also estimate one training process's peak memory")
    group.add_argument("--optimizer", choices=_OPTIMIZERS, default="adam")
    group.add_argument("--mixed_precision", choices=("no", "bf16", "fp16"), default="no")
    group.add_argument("--batch_size", type=int, default=1, help="samples per process")
    group.add_argument("--seq_len", type=int, default=128, help="tokens per sample")
    group.add_argument("--num_processes", type=int, default=1)
    group.add_argument("--strategy", choices=_STRATEGIES, default="ddp",
                       help="how state is split over --num_processes")
    group.add_argument("--calibrate", action="store_true",
                       help="run two real training steps on the CPU and print the measured "
                       "peak beside the estimate")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=estimate_command)
