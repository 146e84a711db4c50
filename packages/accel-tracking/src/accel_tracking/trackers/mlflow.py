"""MLflow: one run in an experiment named after the project (any tracking store or server)."""

from __future__ import annotations

import json
import os
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_tracking.base import GeneralTracker, as_number, on_main_process, skip_warning

__all__ = ["MLflowTracker"]


class MLflowTracker(GeneralTracker):
    """Log params and metrics to an MLflow run.

    The ``MLFLOW_EXPERIMENT_NAME``, ``MLFLOW_RUN_ID``, ``MLFLOW_TAGS`` (JSON),
    ``MLFLOW_NESTED_RUN`` and ``MLFLOW_RUN_NAME`` environment variables override the
    matching arguments, as in Accelerate; MLflow itself reads ``MLFLOW_TRACKING_URI``.

    Args:
        experiment_name: the experiment (created when missing); the project name by default.
        logging_dir: artifact location of a newly created experiment.
        run_id: resume this run instead of starting a new one.
        tags: tags of the experiment and the run.
        nested_run: start the run nested inside the active one.
        run_name: name of the run.
        description: description of the run.
        tracking_uri: tracking store or server (``sqlite:///mlflow.db``, ``http://host:5000``);
            by default MLflow's (``MLFLOW_TRACKING_URI`` or its local default).
    """

    name = "mlflow"
    requires_logging_directory = False
    package = "mlflow"
    extra = "mlflow"

    def __init__(self, experiment_name: str | None = None,
                 logging_dir: str | os.PathLike[str] | None = None, run_id: str | None = None,
                 tags: dict[str, Any] | str | None = None, nested_run: bool = False,
                 run_name: str | None = None, description: str | None = None,
                 tracking_uri: str | None = None) -> None:
        super().__init__()
        tags = env.MLFLOW_TAGS.get() or tags
        if isinstance(tags, str):
            try:
                tags = json.loads(tags)
            except json.JSONDecodeError as error:
                raise ConfigurationError(
                    f"MLflow tags {tags!r} are not a JSON object ({error}); set MLFLOW_TAGS to "
                    'e.g. \'{"team": "nlp"}\'.') from None
        self.experiment_name = env.MLFLOW_EXPERIMENT_NAME.get() or experiment_name
        self.logging_dir = None if logging_dir is None else os.fspath(logging_dir)
        self.run_id = env.MLFLOW_RUN_ID.get() or run_id
        self.tags = tags
        self.nested_run = env.MLFLOW_NESTED_RUN.get_bool(bool(nested_run))
        self.run_name = env.MLFLOW_RUN_NAME.get() or run_name
        self.description = description
        self.tracking_uri = tracking_uri
        self.active_run: Any = None

    @property
    def tracker(self) -> Any:
        return self.active_run

    @on_main_process
    def start(self) -> None:
        mlflow = self.require_sdk()
        if self.tracking_uri is not None:
            mlflow.set_tracking_uri(self.tracking_uri)
        experiment_id = None
        if self.experiment_name:
            found = mlflow.get_experiment_by_name(self.experiment_name)
            experiment_id = (found.experiment_id if found is not None else
                             mlflow.create_experiment(self.experiment_name,
                                                      artifact_location=self.logging_dir,
                                                      tags=self.tags))
        self.active_run = mlflow.start_run(run_id=self.run_id, experiment_id=experiment_id,
                                           run_name=self.run_name, nested=self.nested_run,
                                           tags=self.tags, description=self.description)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Params in batches of MLflow's limit; values longer than its limit are left out."""
        mlflow = self.require_sdk()
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        params = {}
        for key, value in values.items():
            if len(str(value)) > MAX_PARAM_VAL_LENGTH:
                skip_warning(self.name, key, value,
                             f"MLflow params hold at most {MAX_PARAM_VAL_LENGTH} characters")
                continue
            params[key] = value
        items = list(params.items())
        for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            mlflow.log_params(dict(items[start:start + MAX_PARAMS_TAGS_PER_BATCH]),
                              run_id=self.active_run.info.run_id)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers become metrics; anything else is left out with a warning."""
        mlflow = self.require_sdk()
        metrics = {}
        for key, value in values.items():
            number = as_number(value)
            if number is None:
                skip_warning(self.name, key, value, "MLflow metrics are numbers")
            else:
                metrics[key] = number
        if metrics:
            mlflow.log_metrics(metrics, step=step, run_id=self.active_run.info.run_id, **kwargs)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """A matplotlib or plotly figure as an artifact of the run."""
        self.require_sdk().log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        self.require_sdk().log_artifact(local_path=local_path, artifact_path=artifact_path)

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        self.require_sdk().log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def finish(self) -> None:
        if self.active_run is not None:
            self.require_sdk().end_run()
