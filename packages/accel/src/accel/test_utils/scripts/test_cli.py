"""The script Accelerate's CLI tests launch (``accelerate launch .../test_cli.py``): it
only reports which accelerator devices the launched process sees, so a launch that
reaches it proves the command line and the config file were taken."""

from __future__ import annotations

import torch


def main() -> None:
    if torch.cuda.is_available():
        kind, count = "GPU", torch.cuda.device_count()
    elif hasattr(torch, "xpu") and torch.xpu.is_available():
        kind, count = "XPU", torch.xpu.device_count()
    else:
        kind, count = "GPU", 0
    print(f"Successfully ran on {count} {kind}s")


if __name__ == "__main__":
    main()
