"""The ``Accelerator``'s data side: its ``DataLoaderConfiguration`` and the methods on it.

Kept out of ``accelerator.py`` (a mixin) so the data options, ``gather_for_metrics`` and
``skip_first_batches`` live next to each other and next to ``accel_data``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from accel_data.config import DataLoaderConfiguration
from accel_state.errors import ConfigurationError

# accel_data's loaders, samplers and dispatcher are imported by the methods that use them
# (prepare, gather_for_metrics, skip_first_batches), not at `from accel import Accelerator`

__all__ = ["DataMixin", "UNSET", "resolve_dataloader_config"]

UNSET: Any = object()  # "argument not given", distinct from every value a user could pass


def resolve_dataloader_config(split_batches: Any = UNSET,
                              dataloader_config: DataLoaderConfiguration | None = None
                              ) -> DataLoaderConfiguration:
    """One ``DataLoaderConfiguration`` from ``Accelerator``'s arguments.

    The top-level ``split_batches=`` is deprecated (``FutureWarning``); giving it together
    with ``dataloader_config`` is an error, since one of the two would be silently ignored.
    """
    if dataloader_config is not None and not isinstance(dataloader_config,
                                                        DataLoaderConfiguration):
        raise ConfigurationError(
            f"dataloader_config must be a DataLoaderConfiguration, got "
            f"{type(dataloader_config).__name__}; build one with "
            "accel.DataLoaderConfiguration(split_batches=..., even_batches=..., ...).")
    if split_batches is UNSET:
        return dataloader_config if dataloader_config is not None else DataLoaderConfiguration()
    if dataloader_config is not None:
        raise ConfigurationError(
            f"Accelerator got both split_batches={split_batches!r} and dataloader_config="
            f"{dataloader_config!r}; pass only dataloader_config=DataLoaderConfiguration("
            "split_batches=...).")
    warnings.warn(
        "Accelerator(split_batches=...) is deprecated; pass dataloader_config="
        "DataLoaderConfiguration(split_batches=...) instead.", FutureWarning, stacklevel=3)
    return DataLoaderConfiguration(split_batches=split_batches)


class DataMixin:
    """Data options and data methods of ``Accelerator`` (expects ``_dataloader_config``)."""

    _dataloader_config: DataLoaderConfiguration

    @property
    def dataloader_config(self) -> DataLoaderConfiguration:
        return self._dataloader_config

    @dataloader_config.setter
    def dataloader_config(self, value: DataLoaderConfiguration) -> None:
        """Replaceable, as in Accelerate: loaders prepared afterwards use the new options."""
        self._dataloader_config = resolve_dataloader_config(dataloader_config=value)

    @property
    def split_batches(self) -> bool:
        return self._dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self._dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self._dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self._dataloader_config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self._dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self._dataloader_config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self._dataloader_config.use_stateful_dataloader

    def _shard_loader(self, data_loader: torch.utils.data.DataLoader, placement: bool,
                      slice_fn_for_dispatch: Any = None) -> Any:
        """``accel_data.prepare_data_loader`` over the strategy's data-parallel replicas
        (all processes for DDP; fewer when other dimensions, such as TP, share batches)."""
        from accel_data.prepare import prepare_data_loader as _prepare

        strategy = self._strategy  # type: ignore[attr-defined]
        return _prepare(data_loader, device=self.device,  # type: ignore[attr-defined]
                        num_processes=strategy.dp_size, process_index=strategy.dp_rank,
                        group=strategy.dp_group,
                        put_on_device=placement, slice_fn_for_dispatch=slice_fn_for_dispatch,
                        rng_types=self.rng_types,  # type: ignore[attr-defined]
                        **self._dataloader_config.to_kwargs())

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather from every data-parallel replica, dropping the last batch's padding samples.

        Over an epoch of a prepared loader (map-style, sized, ``even_batches`` on) the
        gathered rows are exactly the dataset's, in order. See docs/data.md for
        ``even_batches=False``.
        """
        from accel_data.metrics import gather_for_metrics as _gather_for_metrics

        return _gather_for_metrics(input_data, use_gather_object=use_gather_object,
                                   group=self._strategy.dp_group)  # type: ignore[attr-defined]

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """The rest of ``dataloader``'s current epoch after ``num_batches`` batches.

        Only that epoch is shortened; map-style loaders skip without reading the samples.
        """
        from accel_data.skip import skip_first_batches as _skip_first_batches

        return _skip_first_batches(dataloader, num_batches)

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any],
                           even_batches: bool | None = None) -> Iterator[None]:
        """Let ranks that run out of batches finish while the others still train.

        Inside the block, with DDP, a rank whose loader is exhausted keeps answering the
        others' gradient all-reduces (torch's ``Join`` over ``joinables``, the prepared
        models) instead of hanging them. ``even_batches`` overrides the prepared loaders'
        setting for the block (False: no padding, so ranks may see different numbers of
        batches); join is enabled exactly when batches are uneven. As in Accelerate, anything
        else (one process, a strategy without join, models that are not DDP) runs the block
        as it is, with a warning unless the run is a plain single-process one.
        """
        overriding = even_batches is not None
        if even_batches is None:
            even_batches = self.even_batches
        strategy = self._strategy  # type: ignore[attr-defined]
        joinables = list(joinables)
        usable = [j for j in joinables if _can_join(j)]
        context = strategy.join(usable, enable=not even_batches) \
            if strategy.dp_size > 1 and usable else None
        if context is None:
            if strategy.dp_size > 1 or strategy.runs_distributed:
                warnings.warn(_no_join_message(strategy, joinables, usable, joined=False),
                              UserWarning, stacklevel=3)
            yield
            return
        if len(usable) < len(joinables):
            warnings.warn(_no_join_message(strategy, joinables, usable, joined=True),
                          UserWarning, stacklevel=3)
        loaders = [dl for dl in self._dataloaders  # type: ignore[attr-defined]
                   if hasattr(dl, "even_batches")]
        iterable = [dl for dl in loaders if isinstance(getattr(dl, "dataset", None),
                                                       torch.utils.data.IterableDataset)]
        if overriding and iterable:
            warnings.warn("Overriding even_batches is only supported for map-style datasets, "
                          f"yet {len(iterable)} of the prepared dataloaders are iterable: they "
                          "keep their own setting inside join_uneven_inputs.",
                          UserWarning, stacklevel=3)
            loaders = [dl for dl in loaders if not any(dl is i for i in iterable)]
        previous = [dl.even_batches for dl in loaders]
        try:
            for loader in loaders:
                loader.even_batches = even_batches
            with context:
                yield
        finally:
            for loader, value in zip(loaders, previous, strict=True):
                loader.even_batches = value


def _can_join(obj: Any) -> bool:
    """Whether torch's ``Join`` can take ``obj``: a DDP model or ZeroRedundancyOptimizer, seen
    through a compile wrapper or an accel optimizer wrapper."""
    from torch.distributed.algorithms import Joinable

    obj = getattr(obj, "_orig_mod", obj) if isinstance(obj, torch.nn.Module) else obj
    return isinstance(obj, Joinable) or isinstance(getattr(obj, "optimizer", None), Joinable)


def _no_join_message(strategy: Any, joinables: list[Any], usable: list[Any],
                     joined: bool) -> str:
    """Accelerate's words first (its tests look for them), then what applies here."""
    head = ("Joining uneven inputs is only supported for multi-GPU training, as a result "
            "`join_uneven_inputs` will have no effect")
    if strategy.dp_size <= 1:
        return f"{head}: this run has one data-parallel process."
    skipped = [type(j).__name__ for j in joinables if not any(j is u for u in usable)]
    if joined:
        return (f"{head} for {skipped}: only DDP models (and ZeroRedundancyOptimizers) join; "
                "pass the models accelerator.prepare returned.")
    if usable:
        return (f"{head}: the {strategy.name!r} strategy cannot join uneven inputs (it needs "
                "DDP); keep even_batches=True.")
    return (f"{head} on {skipped}: only DDP models (and ZeroRedundancyOptimizers) join, under "
            f"a DDP strategy (this run's is {strategy.name!r}); pass the models "
            "accelerator.prepare returned, or keep even_batches=True.")
