"""Weights & Biases: one ``wandb.init`` run per job (``WANDB_MODE=offline`` needs no network)."""

from __future__ import annotations

from typing import Any

from accel_tracking.base import InitRunTracker, on_main_process

__all__ = ["WandBTracker"]


class WandBTracker(InitRunTracker):
    """Log to a wandb run.

    Args:
        run_name: the wandb project (the name given to ``init_trackers``).
        **kwargs: passed to ``wandb.init`` (``entity``, ``name``, ``dir``, ``mode``, ``tags``, ...).
    """

    name = "wandb"
    package = "wandb"
    extra = "wandb"

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values, allow_val_change=True)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is a list of images (arrays, tensors or PIL images)."""
        wandb = self.require_sdk()
        self.run.log({key: [wandb.Image(image) for image in images]
                      for key, images in values.items()}, step=step, **kwargs)

    @on_main_process
    def log_table(self, table_name: str, columns: list[str] | None = None,
                  data: list[list[Any]] | None = None, dataframe: Any = None,
                  step: int | None = None, **kwargs: Any) -> None:
        """A ``wandb.Table`` from ``columns`` + ``data`` rows, or from a pandas ``dataframe``."""
        wandb = self.require_sdk()
        table = wandb.Table(columns=columns, data=data, dataframe=dataframe)
        self.run.log({table_name: table}, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
