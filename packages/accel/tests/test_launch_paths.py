"""Accelerate's launcher paths re-export accel_launch's objects; the preemption API."""

from __future__ import annotations

import os
import signal


def test_launcher_paths_are_accel_launch_objects() -> None:
    import accel
    import accel.commands.config
    import accel.commands.launch
    import accel.launchers
    import accel.utils
    import accel.utils.launch
    import accel_launch.config_command
    import accel_launch.config_file
    import accel_launch.launch
    import accel_launch.launch_utils
    import accel_launch.launchers

    assert accel.notebook_launcher is accel.launchers.notebook_launcher \
        is accel_launch.launchers.notebook_launcher
    assert accel.debug_launcher is accel_launch.launchers.debug_launcher
    assert accel.commands.launch.launch_command_parser is accel_launch.launch.launch_command_parser
    assert accel.commands.config.load_config_from_file is \
        accel_launch.config_file.load_config_from_file
    assert accel.commands.config.write_basic_config is \
        accel_launch.config_command.write_basic_config
    for name in ("prepare_multi_gpu_env", "prepare_simple_launcher_cmd_env",
                 "prepare_deepspeed_cmd_env", "is_port_in_use"):
        assert getattr(accel.utils, name) is getattr(accel.utils.launch, name) \
            is getattr(accel_launch.launch_utils, name)


def test_sigterm_marks_preemption_and_saves_one_checkpoint(tmp_path) -> None:
    import torch
    from accel import Accelerator
    from accel.checkpointing import ProjectConfiguration

    previous = signal.getsignal(signal.SIGTERM)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True))
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    assert model is not None
    try:
        accelerator.handle_preemption()
        accelerator.handle_preemption()  # idempotent
        assert accelerator.preemption_requested is False
        assert accelerator.save_state_if_preempted() is False
        os.kill(os.getpid(), signal.SIGTERM)  # would kill the test without the handler
        assert accelerator.preemption_requested is True
        assert accelerator.save_state_if_preempted() is True
        assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint_0"]
    finally:
        signal.signal(signal.SIGTERM, previous)
        accelerator.end_training()


def test_handle_preemption_outside_the_main_thread_is_an_error() -> None:
    import threading

    from accel import Accelerator
    from accel_state.errors import ConfigurationError

    accelerator = Accelerator(cpu=True)
    errors = []

    def call() -> None:
        try:
            accelerator.handle_preemption()
        except ConfigurationError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]
    assert accelerator._preemption is None  # never installed
