"""DeepSpeed ZeRO 1/2/3 as a Strategy: ``deepspeed.initialize`` behind the same four lines.

Chosen when the Accelerator got a ``deepspeed_plugin`` (or ``ACCELERATE_USE_DEEPSPEED``).
``prepare`` fills the config's ``"auto"`` values (:mod:`accel_parallel.deepspeed.config`)
and hands one model with its optimizer and scheduler to ``deepspeed.initialize``; from
then on the engine owns the step, as Accelerate users expect: ``accelerator.backward``
runs the engine's backward and step (the engine divides the loss for accumulation,
reduces gradients, clips, steps optimizer and scheduler only at the accumulation
boundary); ``optimizer.step``, ``zero_grad`` and ``scheduler.step`` are no-ops on the
returned objects. DeepSpeed is imported only here, lazily.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError, DistributedType

from accel_parallel.deepspeed.combinations import refuse_combinations
from accel_parallel.deepspeed.config import fill_auto, hidden_size_of
from accel_parallel.deepspeed.dummies import DummyOptim, DummyScheduler, EngineScheduler
from accel_parallel.deepspeed.plugin import DeepSpeedPlugin
from accel_parallel.deepspeed.precision import cast_floating_inputs, config_precision
from accel_parallel.deepspeed.runtime import (
    announce_setup,
    deepspeed_unmet,
    ensure_process_group,
    import_deepspeed,
    require_deepspeed,
)
from accel_parallel.strategy import BOUNDARY, NO_CONTEXT, PrepareRequest, Strategy
from accel_parallel.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import MicroStep, PartialState

    from accel_parallel.choosing import RunEnvironment, Unmet
    from accel_parallel.selection import StrategyConfig

__all__ = ["DeepSpeedStrategy", "EngineScheduler"]


class DeepSpeedStrategy(Strategy):
    """Models trained by DeepSpeed engines (ZeRO stage 0-3, offload), one per plugin."""

    name = "deepspeed"
    priority = 60  # above fsdp (50): a DeepSpeed plugin is an explicit choice
    plugin_kinds = frozenset({"deepspeed", "parallelism_config"})
    #: options given by data are DeepSpeedPlugin fields (:meth:`configure` builds the plugin)
    options_class = DeepSpeedPlugin

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 plugins: dict[str, DeepSpeedPlugin] | None = None, **options: Any) -> None:
        super().__init__(state, precision=precision, **options)
        self.plugins = dict(plugins or {"default": DeepSpeedPlugin()})
        for name, plugin in self.plugins.items():
            plugin.set_mixed_precision(self.precision.name)
            if plugin.get_value("fp16.enabled") is True and state.device.type == "cpu":
                source = ("Accelerator(mixed_precision='fp16')" if self.precision.name == "fp16"
                          else f"the DeepSpeed config of plugin {name!r} (fp16.enabled=true)")
                raise ConfigurationError(
                    f"DeepSpeed fp16 does not run on CPU: {source} enables it and the device is "
                    f"{state.device}. Use bf16 on CPU.")
        if not any(p.selected for p in self.plugins.values()):
            next(iter(self.plugins.values())).select()
        #: engines by the plugin name that built them, in the order prepared
        self.engines: dict[str, Any] = {}
        #: the resolved (auto-filled) config each engine was built from
        self.configs: dict[str, dict[str, Any]] = {}
        #: the engines prepared with an optimizer (not a teacher prepared for evaluation)
        self._trained: dict[str, Any] = {}
        self._micro_batch: int | None = None
        self._step_skipped = False

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        return "deepspeed" in config.plugins

    @classmethod
    def check(cls, config: StrategyConfig, environment: RunEnvironment) -> list[Unmet]:
        refuse_combinations(config.plugins)  # wrong anywhere: said before a missing package
        return deepspeed_unmet()

    @classmethod
    def from_config(cls, config: StrategyConfig) -> DeepSpeedStrategy:
        refuse_combinations(config.plugins)
        require_deepspeed()
        plugins = config.plugins["deepspeed"]
        if isinstance(plugins, DeepSpeedPlugin):
            plugins = {"default": plugins}
        return cls(config.state, precision=config.precision, plugins=plugins)

    @classmethod
    def configure(cls, config: StrategyConfig, options: Mapping[str, Any],
                  source: str) -> StrategyConfig:
        """Options given by data (a preset's ``zero_stage``, a config file's
        ``strategy_config``) are ``DeepSpeedPlugin`` fields: a plugin is built from them when
        the configuration has none. A plugin from the code (or ``--use_deepspeed``) wins,
        and a warning says the options went unused."""
        if not options:
            return config
        if config.plugins.get("deepspeed") is not None:
            warnings.warn(f"{source} gives DeepSpeed options {dict(options)}, but a DeepSpeed "
                          "plugin was given (deepspeed_plugin= or --use_deepspeed): that "
                          "plugin is used.", UserWarning, stacklevel=4)
            return config
        from accel_parallel.plugins import resolve_deepspeed

        try:
            plugins = resolve_deepspeed(dict(options), None)
        except ConfigurationError as error:
            raise ConfigurationError(f"{source}: {error}") from None
        return dataclasses.replace(config, plugins={**config.plugins, "deepspeed": plugins})

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        """The DeepSpeed plugins by name, also one built from a preset's options."""
        return {"deepspeed": self.plugins}

    @property
    def distributed_type(self) -> DistributedType:
        return DistributedType.DEEPSPEED

    @property
    def mixed_precision(self) -> str:
        """What the engines run in: the selected plugin's ``bf16`` / ``fp16`` ``enabled``
        (a JSON that enables bf16 by itself trains in bf16 whatever ``mixed_precision=``
        said), as Accelerate's ``AcceleratorState.mixed_precision`` reads it."""
        return config_precision(self.plugin.deepspeed_config)

    @property
    def native_amp(self) -> bool:
        return False  # the engine keeps the model in its 16-bit dtype; no autocast runs

    def forward_context(self, autocast_handler: Any = None
                        ) -> contextlib.AbstractContextManager[Any]:
        return NO_CONTEXT  # as native_amp: accelerator.autocast() is a no-op under DeepSpeed

    @property
    def plugin(self) -> DeepSpeedPlugin:
        """The selected plugin: the one the next ``prepare`` uses."""
        return next(p for p in self.plugins.values() if p.selected)

    @property
    def plugin_name(self) -> str:
        return next(n for n, p in self.plugins.items() if p.selected)

    # -- prepare ------------------------------------------------------------------------------
    def prepare(self, request: PrepareRequest) -> PrepareRequest:
        for loader in request.dataloaders:
            self._see_loader(loader)
        if not request.models:
            if request.optimizers or request.schedulers:
                raise ConfigurationError(
                    "With DeepSpeed, pass the model together with its optimizer (and scheduler) "
                    "to one accelerator.prepare() call: deepspeed.initialize builds them as one.")
            return request
        if len(request.models) > 1 or len(request.optimizers) > 1 or len(request.schedulers) > 1:
            raise ConfigurationError(
                f"With DeepSpeed, one prepare() call takes one model, at most one optimizer and "
                f"one scheduler (got {len(request.models)}, {len(request.optimizers)}, "
                f"{len(request.schedulers)}). For several models give "
                "Accelerator(deepspeed_plugins={name: plugin, ...}) and call "
                "plugin.select() before preparing each one.")
        optimizer = request.optimizers[0] if request.optimizers else None
        scheduler = request.schedulers[0] if request.schedulers else None
        engine, ds_optimizer, ds_scheduler = self._initialize(
            request.models[0], optimizer, scheduler, request.evaluation_mode,
            request.accumulation_steps)
        schedulers = [EngineScheduler(ds_scheduler, ds_optimizer)] if request.schedulers else []
        if request.schedulers and ds_scheduler is None:
            raise ConfigurationError("DeepSpeed returned no scheduler for the one given.")
        return PrepareRequest(models=[engine],
                              optimizers=[ds_optimizer] if request.optimizers else [],
                              schedulers=schedulers, dataloaders=request.dataloaders,
                              device_placement=request.device_placement,
                              evaluation_mode=request.evaluation_mode,
                              accumulation_steps=request.accumulation_steps)

    def _see_loader(self, loader: Any) -> None:
        size = getattr(loader, "batch_size", None)
        if size is None:
            size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
        if isinstance(size, int):
            if self._micro_batch is None:
                self._micro_batch = size
            else:
                pick = min if self.plugin.is_train_batch_min else max
                self._micro_batch = pick(self._micro_batch, size)

    def _check_objects(self, config: dict[str, Any], optimizer: Any, scheduler: Any,
                       evaluation_mode: bool) -> None:
        real_optimizer = optimizer is not None and not isinstance(optimizer, DummyOptim)
        if "optimizer" in config and real_optimizer:
            raise ConfigurationError(
                f"The DeepSpeed config defines an optimizer ({config['optimizer'].get('type')!r}) "
                f"and prepare() was also given {type(optimizer).__name__}: pass "
                "accel.utils.DummyOptim(model.parameters(), lr=...) instead, or remove the "
                "config's 'optimizer' section to train with your own.")
        if isinstance(optimizer, DummyOptim) and "optimizer" not in config:
            raise ConfigurationError(
                "prepare() was given a DummyOptim but the DeepSpeed config has no 'optimizer' "
                "section: pass a real torch optimizer, or define one in the config.")
        if optimizer is None and "optimizer" in config and not evaluation_mode:
            raise ConfigurationError(
                "The DeepSpeed config defines an optimizer: pass DummyOptim(model.parameters()) "
                "with the model to prepare() to get the optimizer DeepSpeed builds.")
        if "scheduler" in config and scheduler is not None and not isinstance(
                scheduler, DummyScheduler):
            raise ConfigurationError(
                f"The DeepSpeed config defines a scheduler ({config['scheduler'].get('type')!r}) "
                f"and prepare() was also given {type(scheduler).__name__}: pass "
                "accel.utils.DummyScheduler(optimizer, ...) instead, or remove the config's "
                "'scheduler' section.")
        if (isinstance(scheduler, DummyScheduler) and "scheduler" not in config
                and scheduler.lr_scheduler_callable is None):
            raise ConfigurationError(
                "prepare() was given a DummyScheduler but the DeepSpeed config has no "
                "'scheduler' section: give DummyScheduler(lr_scheduler_callable=...) or a real "
                "scheduler, or define one in the config.")

    def _initialize(self, model: torch.nn.Module, optimizer: Any, scheduler: Any,
                    evaluation_mode: bool, accumulation: int) -> tuple[Any, Any, Any]:
        plugin, name = self.plugin, self.plugin_name
        if name in self.engines:
            raise ConfigurationError(
                f"The DeepSpeed plugin {name!r} already prepared a model: each plugin drives one "
                "engine. Give Accelerator(deepspeed_plugins={...}) one plugin per model and "
                "select() the next one before preparing it.")
        config = plugin.deepspeed_config
        self._check_objects(config, optimizer, scheduler, evaluation_mode)
        dummy_opt = optimizer if isinstance(optimizer, DummyOptim) else None
        dummy_sched = scheduler if isinstance(scheduler, DummyScheduler) else None
        micro = self._micro_batch if self._micro_batch is not None or not evaluation_mode else 1
        filled = fill_auto(
            config, micro_batch=micro, dp_size=self.dp_size,
            accumulation=accumulation, hidden_size=hidden_size_of(model),
            optimizer_params=dummy_opt.config_values() if dummy_opt else None,
            scheduler_params=dummy_sched.config_values() if dummy_sched else None)
        if evaluation_mode or optimizer is None:
            filled.pop("optimizer", None)
            filled.pop("scheduler", None)
        with announce_setup(filled, optimizer, self.state):
            if optimizer is not None and dummy_opt is None:
                filled.setdefault("zero_allow_untested_optimizer", True)
                optimizer = _cpu_optimizer_for_offload(optimizer, filled)
            sched_arg: Any = scheduler
            if dummy_sched is not None:
                sched_arg = None if "scheduler" in filled else dummy_sched.lr_scheduler_callable
            plugin.set_moe_leaf_modules(model)
            ensure_process_group(self.state.device, self.state.local_process_index)
            deepspeed = import_deepspeed()
            kwargs: dict[str, Any] = {"model": model, "config": filled}
            if dummy_opt is not None:
                kwargs["model_parameters"] = dummy_opt.params
            elif optimizer is not None:
                kwargs["optimizer"] = optimizer
            if sched_arg is not None:
                kwargs["lr_scheduler"] = sched_arg
            engine, ds_optimizer, _, ds_scheduler = deepspeed.initialize(**kwargs)
        cast_floating_inputs(engine, filled)
        self.engines[name] = engine
        self.configs[name] = filled
        # given an optimizer (ds_optimizer is no sign: ZeRO-3 returns its offload manager)
        if optimizer is not None and not evaluation_mode:
            self._trained[name] = engine
        return engine, ds_optimizer, ds_scheduler

    # -- the step: the engine's ---------------------------------------------------------------
    def _engine(self) -> Any:
        """The engine ``backward`` drives: the one prepared with an optimizer, whichever
        plugin is selected (as in Accelerate, where a teacher prepared for evaluation after
        the student never takes the student's backward), else the only one; with several
        trained engines, the selected plugin's."""
        trained = self._trained
        if len(trained) == 1:
            return next(iter(trained.values()))
        if not trained and len(self.engines) == 1:
            return next(iter(self.engines.values()))
        if not self.engines:
            raise ConfigurationError("No DeepSpeed engine yet: accelerator.prepare(model, "
                                     "optimizer, ...) first.")
        engine = trained.get(self.plugin_name)
        if engine is None:
            if not trained:
                raise ConfigurationError(
                    f"None of the DeepSpeed engines ({', '.join(self.engines)}) was prepared "
                    "with an optimizer: prepare the model you train together with its optimizer.")
            raise ConfigurationError(
                f"Several DeepSpeed engines train ({', '.join(trained)}) and the selected plugin "
                f"{self.plugin_name!r} is none of them: select() the plugin of the model whose "
                "loss this is before accelerator.backward.")
        return engine

    def backward(self, loss: torch.Tensor, *, accumulation_steps: int = 1,
                 micro_step: MicroStep = BOUNDARY, **kwargs: Any) -> None:
        """The engine's backward and step. The engine divides the loss by its accumulation
        steps (the Accelerator's), reduces the gradients and steps (clipping, optimizer,
        scheduler) only at the boundary ``accumulate()`` says (``micro_step.sync``)."""
        engine = self._engine()
        engine.set_gradient_accumulation_boundary(micro_step.sync)
        engine.backward(loss, **kwargs)
        skipped = engine.skipped_steps
        engine.step()
        self._step_skipped = engine.skipped_steps != skipped

    @property
    def scaler(self) -> None:
        return None  # the engine scales fp16 losses itself

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        return None

    def optimizer_step(self, optimizer: Any, closure: Any = None) -> bool:
        return not self._step_skipped  # taken by the engine in backward

    def zero_grad(self, optimizer: Any, set_to_none: bool = True) -> None:
        return None  # the engine clears its gradients after each step

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor | None:
        """The engine clips inside its step to the config's ``gradient_clipping``; asking
        for another norm is a conflict. Returns the norm the engine measured at its last
        step (None before the first)."""
        engine = self._engine()
        configured = engine.gradient_clipping()
        if float(configured or 0.0) != float(max_norm) or norm_type != 2:
            raise ConfigurationError(
                f"clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}) but the DeepSpeed "
                f"config says gradient_clipping={configured or 0.0} (DeepSpeed clips the 2-norm "
                "inside its step). Set DeepSpeedPlugin(gradient_clipping=...) / the JSON's "
                "gradient_clipping to the same value.")
        norm = engine.get_global_grad_norm()
        return None if norm is None else torch.as_tensor(float(norm))

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        raise ConfigurationError("DeepSpeed cannot clip gradients by value; use "
                                 "gradient_clipping (a norm) in the DeepSpeed config.")

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        return NO_CONTEXT  # the engine defers its reduction to the boundary by itself

    def accumulation_context(self, models: Any,
                             micro_step: MicroStep) -> contextlib.AbstractContextManager[Any]:
        return NO_CONTEXT

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        for engine in self.engines.values():
            if model is engine:
                model = engine.module
                break
        return extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)

    def tracked_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The engine: Accelerate hands save/load hooks the DeepSpeed engines it tracks."""
        if any(model is engine for engine in self.engines.values()):
            return model
        return super().tracked_model(model)

    def checkpoint_format(self, models: list[torch.nn.Module]) -> Any:
        """DeepSpeed's own engine checkpoint inside accel's commit protocol, when any of the
        models is an engine's (:class:`~accel_parallel.deepspeed.checkpoint.DeepSpeedWriter`)."""
        engines = self.engines.values()
        mine = {id(e) for e in engines} | {id(e.module) for e in engines}
        if any(id(m) in mine for m in models):
            from accel_parallel.deepspeed.checkpoint import DeepSpeedWriter

            return DeepSpeedWriter(self.engines)
        return super().checkpoint_format(models)


def _cpu_optimizer_for_offload(optimizer: Any, config: dict[str, Any]) -> Any:
    """With optimizer offload DeepSpeed wants its CPU optimizer (``zero_force_ds_cpu_optimizer``,
    default true): a torch Adam/AdamW becomes ``DeepSpeedCPUAdam``, an Adagrad
    ``DeepSpeedCPUAdagrad``, with the same groups and hyper-parameters, as Accelerate does
    (DeepSpeed compiles the op once). Set ``"zero_force_ds_cpu_optimizer": false`` to keep
    the torch optimizer; other types are passed on and DeepSpeed names what it accepts."""
    zero = config.get("zero_optimization") or {}
    device = (zero.get("offload_optimizer") or {}).get("device", "none")
    if device == "none" or not config.get("zero_force_ds_cpu_optimizer", True):
        return optimizer
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad):
        return optimizer
    from accel_parallel.deepspeed.compat import map_pytorch_optim_to_deepspeed

    return map_pytorch_optim_to_deepspeed(optimizer)
