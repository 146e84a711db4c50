"""Comet, Aim, ClearML, SwanLab and Trackio: thin adapters over each SDK's run object.

Each tracker raises MissingDependencyError with its install line when started without
its package. Comet (``online=False``) and ClearML (``offline=True``) are tested against
their offline archives; Aim, SwanLab and Trackio follow their documented APIs.
"""

from __future__ import annotations

import os
from typing import Any

from accel_state.errors import ConfigurationError

from accel_tracking.base import (
    GeneralTracker,
    InitRunTracker,
    as_number,
    on_main_process,
    skip_warning,
)

__all__ = ["CometMLTracker", "AimTracker", "ClearMLTracker", "SwanLabTracker", "TrackioTracker",
           "clearml_title_series"]


class CometMLTracker(GeneralTracker):
    """Log to a Comet experiment (``comet_ml.start(project_name=run_name, **kwargs)``).

    ``online=False`` writes an offline archive (a zip) to Comet's offline directory
    (``experiment_config=comet_ml.ExperimentConfig(offline_directory=...)`` or
    ``COMET_OFFLINE_DIRECTORY``), uploaded later with ``comet upload``.
    """

    name = "comet_ml"
    requires_logging_directory = False
    package = "comet_ml"
    extra = "comet-ml"

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.writer: Any = None

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def start(self) -> None:
        comet_ml = self.require_sdk()
        if hasattr(comet_ml, "start"):
            self.writer = comet_ml.start(project_name=self.run_name, **self.init_kwargs)
        else:  # comet_ml before 3.41
            self.writer = comet_ml.Experiment(project_name=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer.log_parameters(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers as metrics, strings as "other" values, dicts as grouped metrics."""
        if step is not None:
            self.writer.set_step(step)
        for key, value in values.items():
            number = as_number(value)
            if number is not None:
                self.writer.log_metric(key, number, step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.log_other(key, value, **kwargs)
            elif isinstance(value, dict):
                self.writer.log_metrics(value, step=step, **kwargs)
            else:
                skip_warning(self.name, key, value, "Comet logs numbers, strings or dicts")

    @on_main_process
    def finish(self) -> None:
        if self.writer is not None:
            self.writer.end()


class AimTracker(GeneralTracker):
    """Log to an Aim run stored in the repository ``logging_dir``."""

    name = "aim"
    requires_logging_directory = True
    package = "aim"

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] = ".",
                 **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.fspath(logging_dir)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def start(self) -> None:
        aim = self.require_sdk()
        self.writer = aim.Run(repo=self.logging_dir, **self.init_kwargs)
        self.writer.name = self.run_name

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer["hparams"] = values

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            self.writer.track(value, name=key, step=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None,
                   kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Each value is an image or ``(image, caption)``; ``kwargs``: ``aim_image``, ``track``."""
        aim = self.require_sdk()
        options = kwargs or {}
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            picture = aim.Image(image, caption=caption, **options.get("aim_image", {}))
            self.writer.track(picture, name=key, step=step, **options.get("track", {}))

    @on_main_process
    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()


def clearml_title_series(name: str) -> tuple[str, str]:
    """ClearML's (title, series) for a logged name: ``"title/series"`` as written; else, as
    Accelerate does, an ``eval_`` / ``test_`` / ``train_`` prefix is the series and the rest
    the title (``"eval_loss"`` -> ``("loss", "eval")``), and other names go to ``"train"``."""
    title, slash, series = name.partition("/")
    if slash:
        return title, series or title
    for prefix in ("eval", "test", "train"):
        if name.startswith(f"{prefix}_"):
            return name[len(prefix) + 1:], prefix
    return name, "train"


class ClearMLTracker(GeneralTracker):
    """Log to a ClearML task (the current one when the script already runs inside a task).

    ``offline=True`` calls ``Task.set_offline(True)`` before ``Task.init``: nothing is sent,
    the session is stored under ClearML's cache directory (``CLEARML_CACHE_DIR``) in
    ``offline/<task id>`` plus a zip, for ``Task.import_offline_session`` later. ClearML's
    offline switch is process-wide and stays on after :meth:`finish` (switching back
    would reconnect every session).
    """

    name = "clearml"
    requires_logging_directory = False
    package = "clearml"
    extra = "clearml"

    def __init__(self, run_name: str | None = None, offline: bool = False,
                 **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.offline = bool(offline)
        self.init_kwargs = kwargs
        self.task: Any = None
        self._owns_task = False

    @property
    def tracker(self) -> Any:
        return self.task

    @on_main_process
    def start(self) -> None:
        task_class = self.require_sdk().Task
        if self.offline:
            task_class.set_offline(True)
        self.task = task_class.current_task()
        if self.task is None:
            kwargs = dict(self.init_kwargs)
            kwargs.setdefault("project_name", self.run_name)
            kwargs.setdefault("task_name", self.run_name)
            self.task = task_class.init(**kwargs)
            self._owns_task = True

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.task.connect_configuration(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Scalars by ClearML title and series (see :func:`clearml_title_series`); without a
        step, single values."""
        logger = self.task.get_logger()
        for key, value in values.items():
            number = as_number(value)
            if number is None:
                skip_warning(self.name, key, value, "ClearML scalars are numbers")
                continue
            if step is None:
                logger.report_single_value(name=key, value=number, **kwargs)
                continue
            title, series = clearml_title_series(key)
            logger.report_scalar(title=title, series=series, value=number, iteration=step,
                                 **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        logger = self.task.get_logger()
        for key, image in values.items():
            title, _, series = key.partition("/")
            logger.report_image(title=title, series=series or title, iteration=step,
                                image=image, **kwargs)

    @on_main_process
    def log_table(self, table_name: str, columns: list[str] | None = None,
                  data: list[list[Any]] | None = None, dataframe: Any = None,
                  step: int | None = None, **kwargs: Any) -> None:
        """A table from a pandas ``dataframe``, or from ``data`` rows (headed by ``columns``
        when given, else by its own first row)."""
        if dataframe is None and data is None:
            raise ConfigurationError(
                f"log_table({table_name!r}) got no table: pass dataframe= or data= (rows).")
        table = dataframe if dataframe is not None else (
            [list(columns), *data] if columns else [list(row) for row in data])
        title, series = clearml_title_series(table_name)
        self.task.get_logger().report_table(title=title, series=series, iteration=step,
                                            table_plot=table, **kwargs)

    @on_main_process
    def finish(self) -> None:
        if self.task is not None and self._owns_task:
            self.task.close()


class SwanLabTracker(InitRunTracker):
    """Log to a SwanLab experiment (``swanlab.init(project=run_name, **kwargs)``)."""

    name = "swanlab"
    package = "swanlab"

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        swanlab = self.require_sdk()
        swanlab.log({key: [swanlab.Image(image) for image in images]
                     for key, images in values.items()}, step=step, **kwargs)


class TrackioTracker(InitRunTracker):
    """Log to a Trackio project (``trackio.init(project=run_name, **kwargs)``), local by default."""

    name = "trackio"
    package = "trackio"
