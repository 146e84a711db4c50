"""``DeepSpeedPlugin``: Accelerate's DeepSpeed options, turned into one DeepSpeed config.

Three spellings give the same config (DESIGN.md §8): the plugin's fields, a plain dict of
them (:meth:`DeepSpeedPlugin.from_dict`, also DeepSpeed's own ``offload_optimizer`` /
``offload_param`` keys as a bool, a device name or a dict), and a DeepSpeed JSON (a path or
a dict, ``hf_ds_config``). A field given next to a JSON must agree with it (or fill its
``"auto"``). The remaining ``"auto"`` values are filled at ``prepare`` from what the
strategy sees (:mod:`accel_parallel.deepspeed.config`). Nothing here imports DeepSpeed.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from accel_state import ConfigurationError, env

from accel_parallel.deepspeed.json import AUTO, HfDeepSpeedConfig, is_auto, load_json

__all__ = ["DeepSpeedPlugin", "HfDeepSpeedConfig", "AUTO", "is_auto", "OFFLOAD_DEVICES"]

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: keys of a plain dict that are DeepSpeed's own spelling of an offload (not plugin fields)
_OFFLOAD_KEYS = {"offload_optimizer": "offload_optimizer_device",
                 "offload_param": "offload_param_device"}
_QUIET = 2**31 - 1  # steps_per_print: DeepSpeed logs nothing by itself


@dataclass(kw_only=True)
class DeepSpeedPlugin:
    """Train with DeepSpeed ZeRO (stage 0-3), optionally offloading to CPU / NVMe.

    Fields left ``None`` come from ``ACCELERATE_DEEPSPEED_*`` variables, then from
    defaults. Next to a JSON config a field (given or from a variable) fills the JSON's
    ``"auto"`` or missing key, and one that says otherwise is an error naming both. The
    built config is :attr:`deepspeed_config`; its ``"auto"`` values are filled at ``prepare``.
    """

    hf_ds_config: Any = None
    """A DeepSpeed JSON config: a path, a dict or an :class:`HfDeepSpeedConfig`
    (``ACCELERATE_DEEPSPEED_CONFIG_FILE``). Fields given as well must agree with it."""
    gradient_accumulation_steps: int | str | None = None
    """Micro-batches per optimizer step; ``"auto"`` (default): the Accelerator's."""
    gradient_clipping: float | str | None = None
    """Maximum gradient norm the engine clips to (``ACCELERATE_GRADIENT_CLIPPING``);
    None/"auto": no clipping (0.0), where DeepSpeed alone would clip at 1.0."""
    zero_stage: int | None = None
    """ZeRO stage: 0 (DDP-like), 1 (optimizer states), 2 (+ gradients), 3 (+ parameters);
    default 2."""
    is_train_batch_min: bool = True
    """Accelerate's flag for several train loaders: the smallest batch size is used."""
    offload_optimizer_device: str | None = None
    """``"none"`` (default), ``"cpu"`` or ``"nvme"`` (ZeRO 1-3): optimizer states there."""
    offload_param_device: str | None = None
    """``"none"`` (default), ``"cpu"`` or ``"nvme"`` (ZeRO-3 only): parameters there."""
    offload_optimizer_nvme_path: str | None = None
    """Directory for optimizer states offloaded to nvme."""
    offload_param_nvme_path: str | None = None
    """Directory for parameters offloaded to nvme."""
    zero3_init_flag: bool | None = None
    """Build models partitioned under ZeRO-3 (:meth:`zero3_init_context_manager`)."""
    zero3_save_16bit_model: bool | None = None
    """ZeRO-3: gather 16-bit weights when the model is saved
    (``stage3_gather_16bit_weights_on_model_save``)."""
    transformer_moe_cls_names: str | None = None
    """Comma-separated class names of mixture-of-experts layers (ZeRO-3 leaf modules)."""
    enable_msamp: bool = False
    """MS-AMP fp8: not supported by accel (refused)."""
    msamp_opt_level: str | None = None
    """MS-AMP optimisation level: not supported by accel (refused)."""
    #: the built DeepSpeed config (``"auto"`` values still in it)
    deepspeed_config: dict[str, Any] = field(init=False, repr=False)
    #: extra options of DeepSpeed's offload dicts given in a plain dict
    _offload_options: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: the plugins of one ``deepspeed_plugins`` dict, by name (set by the Accelerator)
    _family: dict[str, DeepSpeedPlugin] = field(default_factory=dict, repr=False)
    #: fields taken from environment variables: field -> ``VARIABLE='value'`` (for errors)
    _from_env: dict[str, str] = field(init=False, default_factory=dict, repr=False)
    selected: bool = field(default=False, repr=False)
    """Whether this plugin is the one ``prepare`` uses (several named plugins)."""

    def __post_init__(self) -> None:
        if self.enable_msamp or self.msamp_opt_level is not None:
            raise ConfigurationError(
                "DeepSpeedPlugin(enable_msamp=True / msamp_opt_level=...) asks for MS-AMP, which "
                "accel does not support (MS-AMP is unmaintained). Use "
                "Accelerator(mixed_precision='bf16'), or fp8 through torchao (docs/precision.md).")
        if self.hf_ds_config is None and env.DEEPSPEED_CONFIG_FILE.get():
            self.hf_ds_config = env.DEEPSPEED_CONFIG_FILE.get()
        self._fields_from_env()
        self._validate_fields()
        if self.hf_ds_config is not None:
            config = load_json(self.hf_ds_config)
            self.hf_ds_config = HfDeepSpeedConfig(config)
            self.deepspeed_config = self._merge_fields(config)
        else:
            self.deepspeed_config = self._from_fields()
            self.hf_ds_config = HfDeepSpeedConfig(self.deepspeed_config)
        self.hf_ds_config.config = self.deepspeed_config
        self._validate_config()

    # -- building ----------------------------------------------------------------------------
    def _fields_from_env(self) -> None:
        reads = {"zero_stage": (env.DEEPSPEED_ZERO_STAGE, int),
                 "gradient_accumulation_steps": (env.GRADIENT_ACCUMULATION_STEPS, int),
                 "gradient_clipping": (env.GRADIENT_CLIPPING, float),
                 "offload_optimizer_device": (env.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE, str),
                 "offload_param_device": (env.DEEPSPEED_OFFLOAD_PARAM_DEVICE, str),
                 "offload_optimizer_nvme_path": (env.DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH, str),
                 "offload_param_nvme_path": (env.DEEPSPEED_OFFLOAD_PARAM_NVME_PATH, str),
                 "transformer_moe_cls_names": (env.DEEPSPEED_MOE_LAYER_CLS_NAMES, str)}
        for name, (var, kind) in reads.items():
            found = var.raw()
            if getattr(self, name) is not None or found is None or found[1] == "":
                continue
            key, raw = found
            try:
                setattr(self, name, raw if is_auto(raw) else kind(raw))
                self._from_env[name] = f"{key}={raw!r}"
            except ValueError:
                raise ConfigurationError(f"Environment variable {key}={raw!r} is not a valid "
                                         f"{kind.__name__} (DeepSpeedPlugin.{name}).") from None
        for name, var in (("zero3_init_flag", env.DEEPSPEED_ZERO3_INIT),
                          ("zero3_save_16bit_model", env.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL)):
            if getattr(self, name) is None and var.is_set():
                setattr(self, name, var.get_bool())
                key, raw = var.raw()
                self._from_env[name] = f"{key}={raw!r}"

    def _validate_fields(self) -> None:
        stage = self.zero_stage
        if stage is not None and (isinstance(stage, bool) or stage not in (0, 1, 2, 3)):
            raise ConfigurationError(f"DeepSpeedPlugin(zero_stage={stage!r}) must be 0, 1, 2 or 3.")
        steps = self.gradient_accumulation_steps
        if steps is not None and not is_auto(steps) and (
                isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ConfigurationError(f"DeepSpeedPlugin(gradient_accumulation_steps={steps!r}) "
                                     "must be a positive integer or 'auto'.")
        clip = self.gradient_clipping
        if clip is not None and not is_auto(clip) and (
                isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip < 0):
            raise ConfigurationError(f"DeepSpeedPlugin(gradient_clipping={clip!r}) must be a "
                                     "non-negative number or 'auto'.")
        for name in ("offload_optimizer_device", "offload_param_device"):
            device = getattr(self, name)
            if device is not None and device not in OFFLOAD_DEVICES:
                raise ConfigurationError(f"DeepSpeedPlugin({name}={device!r}) must be one of "
                                         f"{', '.join(OFFLOAD_DEVICES)}.")
            path = getattr(self, name.replace("_device", "_nvme_path"))
            if device == "nvme" and not path:
                raise ConfigurationError(
                    f"DeepSpeedPlugin({name}='nvme') needs "
                    f"{name.replace('_device', '_nvme_path')}=<directory>.")
        if self.offload_param_device not in (None, "none") and self.zero_stage not in (None, 3):
            raise ConfigurationError(
                f"DeepSpeedPlugin(offload_param_device={self.offload_param_device!r}) needs "
                f"zero_stage=3 (got zero_stage={self.zero_stage}): only ZeRO-3 partitions "
                "parameters.")

    def _offload(self, kind: str) -> dict[str, Any] | None:
        device = getattr(self, f"offload_{kind}_device")
        if device is None:
            return None
        node: dict[str, Any] = {"device": device, **self._offload_options.get(kind, {})}
        if device == "nvme":
            node["nvme_path"] = getattr(self, f"offload_{kind}_nvme_path")
        return node

    def _from_fields(self) -> dict[str, Any]:
        stage = 2 if self.zero_stage is None else self.zero_stage
        zero: dict[str, Any] = {"stage": stage}
        for kind in ("optimizer", "param"):
            node = self._offload(kind)
            if node is not None and node["device"] != "none":
                zero[f"offload_{kind}"] = node
        if stage == 3:
            zero["stage3_gather_16bit_weights_on_model_save"] = bool(self.zero3_save_16bit_model)
        config: dict[str, Any] = {
            "train_batch_size": AUTO, "train_micro_batch_size_per_gpu": AUTO,
            "gradient_accumulation_steps": (AUTO if self.gradient_accumulation_steps is None
                                            else self.gradient_accumulation_steps),
            "zero_optimization": zero, "bf16": {"enabled": AUTO}, "fp16": {"enabled": AUTO},
            "gradient_clipping": AUTO if self.gradient_clipping is None else self.gradient_clipping,
            "steps_per_print": _QUIET,
        }
        return config

    def _merge_fields(self, config: dict[str, Any]) -> dict[str, Any]:
        """Fields given next to a JSON: fill its "auto" or missing keys; a different value
        is a conflict naming both."""
        zero = config.setdefault("zero_optimization", {})
        given: dict[str, tuple[dict[str, Any], str, Any]] = {
            "zero_stage": (zero, "stage", self.zero_stage),
            "gradient_accumulation_steps": (config, "gradient_accumulation_steps",
                                            self.gradient_accumulation_steps),
            "gradient_clipping": (config, "gradient_clipping", self.gradient_clipping),
        }
        for kind in ("optimizer", "param"):
            device = getattr(self, f"offload_{kind}_device")
            path = getattr(self, f"offload_{kind}_nvme_path")
            if device is not None:
                node = zero.setdefault(f"offload_{kind}", {})
                given[f"offload_{kind}_device"] = (node, "device", device)
            if path is not None and f"offload_{kind}" in zero:
                given[f"offload_{kind}_nvme_path"] = (zero[f"offload_{kind}"], "nvme_path", path)
        if self.zero3_save_16bit_model is not None:
            given["zero3_save_16bit_model"] = (zero, "stage3_gather_16bit_weights_on_model_save",
                                               self.zero3_save_16bit_model)
        for name, (node, key, value) in given.items():
            if value is None or is_auto(value):
                continue
            present = node.get(key)
            if present is None or is_auto(present):
                node[key] = value
            elif present != value:
                raise ConfigurationError(
                    f"DeepSpeed config conflict: {self._source(name, value)} but the DeepSpeed "
                    f"JSON (hf_ds_config) says {key}={present!r}. Remove one of them or make "
                    "them agree.")
        if self.zero_stage is None and "stage" in zero and not is_auto(zero["stage"]):
            self.zero_stage = zero["stage"]
        config.setdefault("steps_per_print", _QUIET)
        return config

    def _source(self, name: str, value: Any) -> str:
        if name in self._from_env:
            return (f"the environment variable {self._from_env[name]} "
                    f"(DeepSpeedPlugin.{name})")
        return f"DeepSpeedPlugin({name}={value!r})"

    def _validate_config(self) -> None:
        zero = self.deepspeed_config.get("zero_optimization", {})
        stage = zero.get("stage", 0)
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise ConfigurationError(f"DeepSpeed config zero_optimization.stage={stage!r} must be "
                                     "0, 1, 2 or 3.")
        self.zero_stage = stage
        for kind in ("optimizer", "param"):
            device = (zero.get(f"offload_{kind}") or {}).get("device", "none")
            if device not in OFFLOAD_DEVICES:
                raise ConfigurationError(
                    f"DeepSpeed config zero_optimization.offload_{kind}.device={device!r} must be "
                    f"one of {', '.join(OFFLOAD_DEVICES)}.")
            if kind == "param" and device != "none" and stage != 3:
                raise ConfigurationError(
                    f"DeepSpeed config zero_optimization.offload_param.device={device!r} needs "
                    f"ZeRO stage 3 (the config has stage {stage}): only ZeRO-3 partitions "
                    "parameters.")
        if self.zero3_init_flag and stage != 3:
            # Accelerate warns and drops it: configs written for it (the flag next to a stage-2
            # JSON) must still run; the flag changes nothing below ZeRO-3
            warnings.warn(f"{self._source('zero3_init_flag', True)} only applies to ZeRO stage 3 "
                          f"(the config has stage {stage}): it is turned off.", stacklevel=3)
            self.zero3_init_flag = False

    # -- the plain-dict spelling -------------------------------------------------------------
    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> DeepSpeedPlugin:
        """A plugin from a plain dict of its field names, plus DeepSpeed's
        ``offload_optimizer`` / ``offload_param`` as a bool (True: ``"cpu"``), a device
        name, or DeepSpeed's own dict (``{"device": "cpu", "pin_memory": True}``)."""
        known = {f.name for f in fields(cls) if f.init and not f.name.startswith("_")}
        known.discard("selected")
        kwargs: dict[str, Any] = {}
        offload_options: dict[str, dict[str, Any]] = {}
        for key, value in options.items():
            if key in _OFFLOAD_KEYS:
                kind = key.removeprefix("offload_")
                if isinstance(value, Mapping):
                    value = dict(value)
                    if "nvme_path" in value:
                        kwargs[f"offload_{kind}_nvme_path"] = value.pop("nvme_path")
                    device = value.pop("device", "cpu")
                    offload_options[kind] = value
                elif isinstance(value, bool):
                    device = "cpu" if value else "none"
                elif isinstance(value, str):
                    device = value
                else:
                    raise ConfigurationError(
                        f"deepspeed_plugin={{{key!r}: {value!r}}}: give a bool, a device name "
                        f"({', '.join(OFFLOAD_DEVICES)}) or DeepSpeed's dict "
                        "({'device': 'cpu', ...}).")
                if _OFFLOAD_KEYS[key] in options:
                    raise ConfigurationError(f"deepspeed_plugin has both {key!r} and "
                                             f"{_OFFLOAD_KEYS[key]!r}: give one of them.")
                kwargs[_OFFLOAD_KEYS[key]] = device
            elif key in known:
                kwargs[key] = value
            else:
                raise ConfigurationError(
                    f"deepspeed_plugin has an unknown key {key!r}; use DeepSpeedPlugin's fields "
                    f"({', '.join(sorted(known))}) or 'offload_optimizer'/'offload_param'. For "
                    "DeepSpeed's own JSON keys pass DeepSpeedPlugin(hf_ds_config={...}).")
        return cls(**kwargs, _offload_options=offload_options)

    # -- Accelerate's helpers ----------------------------------------------------------------
    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The config value at a dotted key (``"zero_optimization.stage"``)."""
        return self.hf_ds_config.get_value(ds_key_long, default)

    def is_auto(self, ds_key_long: str) -> bool:
        return is_auto(self.get_value(ds_key_long))

    def fill_match(self, ds_key_long: str, mismatches: list[str] | None = None,
                   must_match: bool = True, **kwargs: Any) -> None:
        """Fill ``ds_key_long`` when it is "auto" with ``kwargs[last key]``; a different
        non-auto value is appended to ``mismatches`` (when ``must_match``)."""
        node, key = self.hf_ds_config.find_config_node(ds_key_long)
        if node is None or key not in kwargs:
            return
        if is_auto(node.get(key)):
            node[key] = kwargs[key]
        elif must_match and mismatches is not None and node.get(key) != kwargs[key]:
            mismatches.append(f"- ds {ds_key_long}={node.get(key)} vs accel {key}={kwargs[key]}")

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """Fill ``bf16.enabled`` / ``fp16.enabled`` from the Accelerator's precision ("no",
        "bf16", "fp16"); a JSON that says otherwise is a conflict naming both."""
        from accel_parallel.deepspeed.config import apply_precision

        apply_precision(self.deepspeed_config, mixed_precision)

    @property
    def zero3_init_flag_enabled(self) -> bool:
        return bool(self.zero3_init_flag) and self.zero_stage == 3

    def zero3_init_context_manager(self, enable: bool = False) -> Any:
        """The context in which to build a model so that ZeRO-3 partitions it as it is
        created (``deepspeed.zero.Init``), when ``zero3_init_flag`` (or ``enable``) is set
        and the stage is 3; else a no-op context. Call it after the Accelerator exists (it
        needs the process group). Accelerate has it at
        ``accelerator.state.deepspeed_plugin.zero3_init_context_manager``."""
        import contextlib

        if not (enable or self.zero3_init_flag) or self.zero_stage != 3:
            return contextlib.nullcontext()
        from accel_parallel.deepspeed.config import zero_init_config
        from accel_parallel.deepspeed.runtime import import_deepspeed

        deepspeed = import_deepspeed()
        return deepspeed.zero.Init(config_dict_or_path=zero_init_config(self.deepspeed_config))

    def set_moe_leaf_modules(self, model: Any) -> None:
        """Mark the :attr:`transformer_moe_cls_names` classes as ZeRO-3 leaf modules."""
        if not self.transformer_moe_cls_names:
            return
        names = {n.strip() for n in self.transformer_moe_cls_names.split(",") if n.strip()}
        classes = {type(m) for m in model.modules() if type(m).__name__ in names}
        missing = names - {c.__name__ for c in classes}
        if missing:
            raise ConfigurationError(f"transformer_moe_cls_names names {sorted(missing)}, which "
                                     f"the model {type(model).__name__} does not contain.")
        from accel_parallel.deepspeed.runtime import import_deepspeed

        import_deepspeed().utils.set_z3_leaf_modules(model, sorted(classes, key=str))

    # -- several named plugins ---------------------------------------------------------------
    def select(self, _from_accelerator_state: bool = False) -> None:
        """Make this plugin the one the next ``prepare`` uses (of ``deepspeed_plugins``)."""
        for plugin in self._family.values():
            plugin.selected = plugin is self
        self.selected = True
