"""Variables read by the layer-1 services: tracking, checkpoints, precision."""

from __future__ import annotations

from accel_state.env._core import _var

# --- accel-tracking: failure policy and MLflow's run settings (read by MLflowTracker) -----
TRACKING_STRICT = _var(
    "ACCEL_TRACKING_STRICT",
    "Make a tracker that fails (start, log or finish raises: network down, bad credentials) "
    "an error. By default such a tracker warns once and training continues without failing.")
MLFLOW_EXPERIMENT_NAME = _var("MLFLOW_EXPERIMENT_NAME", "MLflow experiment to log into; "
                              "takes precedence over the project name given to init_trackers.")
MLFLOW_RUN_ID = _var("MLFLOW_RUN_ID", "Resume this existing MLflow run instead of a new one.")
MLFLOW_TAGS = _var("MLFLOW_TAGS", "JSON object of tags for the MLflow experiment and run.")
MLFLOW_NESTED_RUN = _var("MLFLOW_NESTED_RUN", "1 to start the MLflow run nested in the "
                         "active one.")
MLFLOW_RUN_NAME = _var("MLFLOW_RUN_NAME", "Name of the MLflow run.")

# --- accel-checkpoint: multi-process saves, and a test-only hook for crash tests -----------
CHECKPOINT_PEER_TIMEOUT = _var(
    "ACCEL_CHECKPOINT_PEER_TIMEOUT",
    "Seconds rank 0 waits for the other ranks to enter a checkpoint save (default 60). If "
    "they do not come (save_state called on the main process only), rank 0 commits the "
    "checkpoint alone, without their RNG states, instead of hanging.")
CHECKPOINT_VERIFY = _var(
    "ACCEL_CHECKPOINT_VERIFY",
    "How Accelerator.load_state checks a checkpoint's bytes when verify= is not given: "
    "'full' (default: every byte before anything is loaded) or 'background' (load at once, "
    "check while training starts; the first optimizer step waits for the check).")
CHECKPOINT_TRUST_PICKLES = _var(
    "ACCEL_CHECKPOINT_TRUST_PICKLES",
    "1 to load checkpoints whose layout's writer reads its files with a full unpickler "
    "(RankCheckpointWriter.unpickles == 'arbitrary', e.g. an engine's .pt files), as "
    "load_state(trust_pickles=True) does. Unpickling can run code: set it only for "
    "checkpoints you trust. The files are still verified against the manifest first.")
CHECKPOINT_TEST_DELAY = _var(
    "ACCEL_CHECKPOINT_TEST_DELAY",
    "Test only: seconds a checkpoint save sleeps after each file and before its rename, so "
    "crash tests can kill the process at a chosen point. Never set it in real runs.")

# --- accel-precision: fp8 backend choice -------------------------------------------------
FP8_BACKEND = _var(
    "ACCEL_FP8_BACKEND",
    "Backend of mixed_precision='fp8' when no recipe handler names one: 'te' (Transformer "
    "Engine, CUDA only) or 'ao' (torchao). Unset: Transformer Engine on a CUDA machine that "
    "has it, else torchao.", "ACCELERATE_FP8_BACKEND")

__all__ = [name for name in dict(globals()) if name.isupper()]
