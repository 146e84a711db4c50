"""``accel merge-weights CHECKPOINT_DIRECTORY OUTPUT_PATH``: a sharded checkpoint to safetensors.

Registered through the ``accel.cli`` entry-point group; registering (and ``--help``)
imports nothing heavy, the handler imports :mod:`accel_checkpoint.merge` (and torch).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "merge_command"]


def merge_command(args: argparse.Namespace) -> int:
    """Merge, then print the files written (errors become one line through ``accel``).
    A DeepSpeed ZeRO checkpoint goes through DeepSpeed's zero_to_fp32 (merge_deepspeed)."""
    from accel_checkpoint.merge_deepspeed import is_deepspeed_checkpoint, merge_deepspeed_weights

    options = {"safe_serialization": not args.unsafe_serialization,
               "remove_checkpoint_dir": args.remove_checkpoint_dir,
               "model_name": args.model_name, "max_shard_size": args.max_shard_size}
    if is_deepspeed_checkpoint(args.checkpoint_directory):
        written = merge_deepspeed_weights(args.checkpoint_directory, args.output_path,
                                          trust_pickles=args.trust_pickles or None, **options)
    else:
        from accel_checkpoint.merge import merge_fsdp_weights

        written = merge_fsdp_weights(args.checkpoint_directory, args.output_path, **options)
    for path in written:
        print(f"wrote {path}")
    if args.remove_checkpoint_dir:
        print(f"removed {args.checkpoint_directory}")
    return 0


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``accel merge-weights``."""
    parser = subparsers.add_parser(
        "merge-weights", help="Merge a sharded (FSDP / torch.distributed.checkpoint) or "
        "DeepSpeed ZeRO checkpoint into one safetensors file, in one process.",
        description="Merge the shards of a torch.distributed.checkpoint directory (written "
        "by accel's sharded save or Accelerate's FSDP SHARDED_STATE_DICT) into "
        "OUTPUT_PATH/model.safetensors, or shards + model.safetensors.index.json when larger "
        "than --max_shard_size; a DeepSpeed ZeRO checkpoint (accel's or a bare save_dir) is "
        "merged by DeepSpeed's zero_to_fp32 (needs deepspeed and --trust_pickles). Needs no "
        "process group and no GPU.")
    parser.add_argument("checkpoint_directory", help="the sharded checkpoint directory")
    parser.add_argument("output_path", help="directory to write the merged weights into")
    parser.add_argument("--unsafe_serialization", action="store_true",
                        help="write pytorch_model.bin (torch.save) instead of safetensors")
    parser.add_argument("--remove_checkpoint_dir", action="store_true",
                        help="delete the sharded checkpoint after a successful merge")
    parser.add_argument("--model_name", default=None,
                        help="which saved entry to merge when the checkpoint holds several "
                        "models (default: the only one)")
    parser.add_argument("--max_shard_size", default="10GB",
                        help="largest output file before splitting into shards (default 10GB)")
    parser.add_argument("--trust_pickles", action="store_true",
                        help="DeepSpeed ZeRO checkpoints: allow DeepSpeed's full unpickler "
                        "(only for checkpoints whose origin you trust)")
    parser.set_defaults(func=merge_command)
