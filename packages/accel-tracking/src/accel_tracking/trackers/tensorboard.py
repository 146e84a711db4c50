"""TensorBoard: event files in ``<logging_dir>/<run_name>`` (torch's writer, else tensorboardX).

As in Accelerate, ``logging_dir`` is the project's logging directory (``project_dir`` unless
``ProjectConfiguration(logging_dir=...)`` says otherwise) and the run name its sub-folder.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from accel_state.errors import MissingDependencyError

from accel_tracking.base import GeneralTracker, as_number, flatten, on_main_process, skip_warning

__all__ = ["TensorBoardTracker"]

logger = logging.getLogger("accel.tracking")


def _summary_writer_class() -> Any:
    """torch.utils.tensorboard.SummaryWriter (needs the tensorboard package), else tensorboardX."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise MissingDependencyError("tensorboard", extra="tensorboard", dist="accel-tracking",
                                         feature="the 'tensorboard' tracker") from None
    return SummaryWriter


class TensorBoardTracker(GeneralTracker):
    """Write scalars, text, images and hyperparameters as TensorBoard event files.

    Args:
        run_name: sub-directory of ``logging_dir`` for this run (the project name).
        logging_dir: where runs go (``Accelerator(project_dir=...)``'s logging dir).
        **kwargs: passed to ``SummaryWriter`` (``flush_secs``, ``max_queue``, ...).
    """

    name = "tensorboard"
    requires_logging_directory = True
    package = "tensorboard"
    extra = "tensorboard"

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir_param = logging_dir  # Accelerate's name for the parent folder
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @classmethod
    def is_available(cls) -> bool:
        from accel_state.imports import is_package_available

        return is_package_available("tensorboard") or is_package_available("tensorboardX")

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def start(self) -> None:
        """Open the writer in ``<logging_dir>/<run_name>`` (read at start, as Accelerate does)
        and say once where the event files go: nothing else tells the user."""
        self.logging_dir = os.path.join(self.logging_dir_param, self.run_name)
        self.writer = _summary_writer_class()(self.logging_dir, **self.init_kwargs)
        logger.info("TensorBoard: event files for run %r go to %s (view them with: "
                    "tensorboard --logdir %s)", self.run_name,
                    os.path.abspath(self.logging_dir), self.logging_dir_param)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Hyperparameters (flattened, non-scalars as text) plus ``hparams.json`` in the run dir."""
        flat = {k: v if as_number(v) is not None or isinstance(v, str) else str(v)
                for k, v in flatten(values).items()}
        self.writer.add_hparams(flat, metric_dict={})
        self.writer.flush()
        with open(os.path.join(self.logging_dir, "hparams.json"), "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, default=str)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers become scalars, strings text, dicts of numbers grouped scalars."""
        for key, value in values.items():
            number = as_number(value)
            if number is not None:
                self.writer.add_scalar(key, number, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
            else:
                skip_warning(self.name, key, value, "TensorBoard logs numbers, strings or dicts "
                             "of numbers; use log_images for images")
        self.writer.flush()

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is a batch of images (N x C x H x W unless ``dataformats`` says otherwise)."""
        for key, images in values.items():
            self.writer.add_images(key, images, global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()
