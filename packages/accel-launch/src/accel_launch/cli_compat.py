"""Accelerate's CLI-module names (``accelerate.commands.*``) mapped onto accel's verbs: the
parser classes, the per-verb parser builders, each module's ``main`` and the launcher
functions, so code that drives Accelerate's CLI from Python runs on accel.

Nothing here imports torch at module level (``accel --help`` stays instant).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from accel_launch.parser import AccelArgumentParser, AccelHelpFormatter, verb_parser

__all__ = ["CONFIG_DESCRIPTION", "CustomArgumentGroup", "CustomArgumentParser",
           "CustomHelpFormatter", "SubcommandHelpFormatter", "clean_option",
           "config_command_parser", "default_command_parser", "deepspeed_launcher",
           "env_command_parser", "get_cluster_input", "get_config_parser",
           "get_sagemaker_input", "get_user_input", "multi_gpu_launcher", "options_to_group",
           "sagemaker_launcher",
           "simple_launcher", "tpu_launcher", "tpu_pod_launcher", "update_command_parser",
           "verb_main"]

#: Accelerate's parser and help-formatter classes are accel's (typo hints, twin spellings)
CustomArgumentParser = AccelArgumentParser
CustomHelpFormatter = AccelHelpFormatter
CONFIG_DESCRIPTION = ("Ask about the machine, processes, engines and precision, then write a "
                      "config file for `accel launch` in Accelerate's YAML schema.")


class CustomArgumentGroup(argparse._ArgumentGroup):
    """Accelerate's argument-group class: accel's groups are argparse's own."""


class SubcommandHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Accelerate's formatter for the ``config`` sub-commands: keeps descriptions' lines."""


def verb_main(verb: str) -> Callable[[], int]:
    """A module-level ``main()`` that runs ``accel VERB`` on ``sys.argv[1:]``."""

    def main() -> int:
        from accel_launch.cli import main as accel_main

        return accel_main([verb, *sys.argv[1:]])

    main.__doc__ = f"Run ``accel {verb}`` with this process's arguments."
    return main


def get_config_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel config`` parser with its ``default`` and ``update`` sub-commands."""
    from accel_launch.config_command import register

    return verb_parser(register, "config", subparsers)


config_command_parser = get_config_parser


def _config_child(name: str, subparsers: Any) -> argparse.ArgumentParser:
    from accel_launch import config_command

    if subparsers is None:
        parser = get_config_parser()
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices[name]
    return getattr(config_command, f"add_{name}_command")(subparsers)


def default_command_parser(parser: Any = None, parents: Any = None) -> argparse.ArgumentParser:
    """``accel config default``'s parser, added to ``parser`` (``config``'s sub-parsers) when
    given, as Accelerate's builder takes it; ``parents`` is accepted and unused."""
    return _config_child("default", parser)


def update_command_parser(parser: Any = None, parents: Any = None) -> argparse.ArgumentParser:
    """``accel config update``'s parser (see :func:`default_command_parser`)."""
    return _config_child("update", parser)


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    from accel_launch.env_command import register

    return verb_parser(register, "env", subparsers)


def get_cluster_input() -> Any:
    """Ask the `accel config` questions; the answers as Accelerate's ``ClusterConfig``."""
    from accel_launch.config_classes import ClusterConfig
    from accel_launch.config_command import _cuda_devices
    from accel_launch.prompts import Prompter
    from accel_launch.questionnaire import ask_config

    answers = ClusterConfig.process_config(ask_config(Prompter(), _cuda_devices()))
    return ClusterConfig(**answers)


get_user_input = get_cluster_input


def _refuse(what: str, why: str) -> NoReturn:
    from accel_state.errors import ConfigurationError

    raise ConfigurationError(f"{what} is refused: {why}")


def get_sagemaker_input() -> NoReturn:
    from accel_launch.config_classes import SAGEMAKER_REFUSAL

    _refuse("get_sagemaker_input()", SAGEMAKER_REFUSAL)


#: Accelerate's map from the flag that picks a platform to the help section of its options,
#: with accel's section titles (``accel launch --help`` shows every section; the refused
#: platforms' flags are listed together)
options_to_group = {
    "multi_gpu": "processes and machines",
    "tpu": "refused (Megatron-LM, TPU, SageMaker, IPEX/XPU)",
    "use_deepspeed": "DeepSpeed",
    "use_fsdp": "FSDP",
    "use_megatron_lm": "refused (Megatron-LM, TPU, SageMaker, IPEX/XPU)",
    "fp8_backend": "fp8",
}


def clean_option(option: str) -> str | None:
    """A long option's destination (``--num-processes`` -> ``num_processes``); None otherwise."""
    if "fp8_backend" in option:
        option = "--fp8_backend"
    return option[2:].replace("-", "_") if option.startswith("--") else None


def _launch(args: argparse.Namespace) -> int:
    from accel_launch.elastic import run_launch

    return run_launch(args)


def simple_launcher(args: argparse.Namespace) -> int:
    """Accelerate's one-process launcher: accel's launch decides from ``args`` alone."""
    return _launch(args)


def multi_gpu_launcher(args: argparse.Namespace) -> int:
    """Accelerate's torchrun launcher: accel's launch (torch's elastic agent) for ``args``."""
    return _launch(args)


def deepspeed_launcher(args: argparse.Namespace) -> int:
    """Accelerate's DeepSpeed launcher: accel's launch for ``args`` (``--use_deepspeed``)."""
    return _launch(args)


def tpu_launcher(args: argparse.Namespace) -> NoReturn:
    from accel_launch.tpu_command import TPU_REFUSAL

    _refuse("tpu_launcher()", TPU_REFUSAL)


def tpu_pod_launcher(args: argparse.Namespace) -> NoReturn:
    from accel_launch.tpu_command import TPU_REFUSAL

    _refuse("tpu_pod_launcher()", TPU_REFUSAL)


def sagemaker_launcher(sagemaker_config: Any, args: argparse.Namespace) -> NoReturn:
    from accel_launch.config_classes import SAGEMAKER_REFUSAL

    _refuse("sagemaker_launcher()", SAGEMAKER_REFUSAL)
