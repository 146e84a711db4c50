"""The Accelerator's DeepSpeed arguments, resolved into named ``DeepSpeedPlugin`` objects.

``deepspeed_plugin=`` takes a plugin, a plain dict of its fields or a dict of name -> plugin
(Accelerate's multi-model form, also ``deepspeed_plugins=``); ``ACCELERATE_USE_DEEPSPEED``
builds one from the ``ACCELERATE_DEEPSPEED_*`` variables. Called by
``accel._resolve.resolve_plugins``; the result goes to ``StrategyConfig.plugins["deepspeed"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_state import ConfigurationError, env

if TYPE_CHECKING:
    from accel_parallel.deepspeed_plugin import DeepSpeedPlugin

__all__ = ["resolve_deepspeed"]


def resolve_deepspeed(deepspeed_plugin: Any, deepspeed_plugins: Any,
                      gradient_state: Any = None) -> dict[str, DeepSpeedPlugin] | None:
    """The DeepSpeed plugins by name (a single one is ``"default"``), or None without
    DeepSpeed. A plugin's accumulation steps become the Accelerator's when it gave none
    (1); two different counts are an error naming both."""
    if deepspeed_plugin is not None and deepspeed_plugins is not None:
        raise ConfigurationError("Accelerator got both deepspeed_plugin= and deepspeed_plugins=: "
                                 "give several named plugins as deepspeed_plugins only.")
    given = deepspeed_plugins if deepspeed_plugins is not None else deepspeed_plugin
    if given is None and not env.USE_DEEPSPEED.get_bool():
        return None
    from accel_parallel.deepspeed_plugin import DeepSpeedPlugin  # only when DeepSpeed is asked for

    if given is None:
        given = DeepSpeedPlugin()
    plugins = [v for v in given.values()] if isinstance(given, dict) else []
    if isinstance(given, DeepSpeedPlugin):
        named = {"default": given}
    elif isinstance(given, dict) and given and all(isinstance(v, DeepSpeedPlugin) for v in plugins):
        named = dict(given)
    elif isinstance(given, dict) and deepspeed_plugins is None and not any(
            isinstance(v, DeepSpeedPlugin) for v in plugins):
        named = {"default": DeepSpeedPlugin.from_dict(given)}
    else:
        arg = "deepspeed_plugins" if deepspeed_plugins is not None else "deepspeed_plugin"
        raise ConfigurationError(
            f"Accelerator({arg}={given!r}) must be a DeepSpeedPlugin, a dict of its fields "
            "({'zero_stage': 2, ...}) or a non-empty dict of name -> DeepSpeedPlugin.")
    for plugin in named.values():
        plugin._family = named
    if gradient_state is not None:
        _agree_on_accumulation(named, gradient_state)
    return named


def _agree_on_accumulation(plugins: dict[str, DeepSpeedPlugin], gradient_state: Any) -> None:
    steps = gradient_state.num_steps
    for name, plugin in plugins.items():
        count = plugin.get_value("gradient_accumulation_steps")
        if not isinstance(count, int) or isinstance(count, bool):
            continue  # "auto": filled from the Accelerator at prepare
        if steps == 1 and count != 1:
            gradient_state.plugin_kwargs["num_steps"] = steps = count
        elif count != steps:
            raise ConfigurationError(
                f"Two gradient accumulation counts: the Accelerator's gradient_accumulation_steps"
                f"={steps} and the DeepSpeed config's gradient_accumulation_steps={count} (plugin "
                f"{name!r}). Give it in one place, or make them agree.")
