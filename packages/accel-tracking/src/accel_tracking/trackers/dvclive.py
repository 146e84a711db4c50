"""DVCLive: metrics and params as plain files (``dvclive/`` by default), or a DVC experiment."""

from __future__ import annotations

from typing import Any

from accel_tracking.base import GeneralTracker, as_number, on_main_process, skip_warning

__all__ = ["DVCLiveTracker"]


class DVCLiveTracker(GeneralTracker):
    """Log through a ``dvclive.Live``.

    Args:
        run_name: unused by DVCLive (kept for the common ``(project_name, **kwargs)`` call).
        live: an existing ``Live`` to log into instead of creating one.
        **kwargs: passed to ``Live`` (``dir``, ``save_dvc_exp``, ``report``, ...).
    """

    name = "dvclive"
    requires_logging_directory = False
    package = "dvclive"
    extra = "dvclive"

    def __init__(self, run_name: str | None = None, live: Any = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.live = live
        self.init_kwargs = kwargs

    @property
    def tracker(self) -> Any:
        return self.live

    @on_main_process
    def start(self) -> None:
        if self.live is None:
            self.live = self.require_sdk().Live(**self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.live.log_params(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers and strings (DVCLive records both) become metrics at ``step`` (DVCLive's
        own counter when ``None``), then a step."""
        if step is not None:
            self.live.step = step
        for key, value in values.items():
            metric = value if isinstance(value, str) else as_number(value)
            if metric is None:
                skip_warning(self.name, key, value, "DVCLive metrics are numbers or strings")
            else:
                self.live.log_metric(key, metric, **kwargs)
        self.live.next_step()

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is one image (array, PIL image or path) saved under ``plots/images``."""
        for key, image in values.items():
            self.live.log_image(key, image)

    @on_main_process
    def finish(self) -> None:
        if self.live is not None:
            self.live.end()
