"""Read back what the trackers wrote, from the files alone (tests, offline checks).

Each reader imports its backend lazily and returns plain Python data, so a test can
assert on a real run without mocking the SDK.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from typing import Any

__all__ = ["read_tensorboard_scalars", "read_wandb_offline_runs", "read_mlflow_runs",
           "read_dvclive_metrics"]

_WANDB_BLOCK = 32768
_WANDB_HEADER = 7  # ":W&B", a 2-byte magic number, a 1-byte version


def read_tensorboard_scalars(run_dir: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` from the event files directly in ``run_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(os.fspath(run_dir))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def _wandb_records(path: str) -> list[bytes]:
    """The payloads of a ``.wandb`` file (a LevelDB-style log of 32 KiB blocks)."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a wandb run file (header {data[:7]!r}).")
    records, pending, pos = [], b"", _WANDB_HEADER
    while pos + 7 <= len(data):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < 7:  # block trailer: padding
            pos += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            records.append(pending)
            pending = b""
    return records


def read_wandb_offline_runs(wandb_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Each ``offline-run-*`` under ``wandb_dir``: ``{"dir", "id", "config", "history"}``.

    ``history`` is the list of rows logged (user keys plus wandb's ``_step``...),
    ``config`` the stored configuration (values decoded from JSON).
    """
    from wandb.proto import wandb_internal_pb2

    runs = []
    for run_dir in sorted(glob.glob(os.path.join(os.fspath(wandb_dir), "offline-run-*"))):
        config: dict[str, Any] = {}
        history: list[dict[str, Any]] = []
        files = glob.glob(os.path.join(run_dir, "*.wandb"))
        for payload in _wandb_records(files[0]) if files else []:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    _put(row, item, json.loads(item.value_json))
                history.append(row)
            elif kind == "config":
                for item in record.config.update:
                    _put(config, item, json.loads(item.value_json))
        runs.append({"dir": run_dir, "id": run_dir.rsplit("-", 1)[-1], "config": config,
                     "history": history})
    return runs


def _put(target: dict[str, Any], item: Any, value: Any) -> None:
    """Store ``value`` under the item's key; a nested key (media, tables) makes nested dicts."""
    keys = [item.key] if item.key else list(item.nested_key)
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def read_mlflow_runs(tracking_uri: str, experiment_name: str) -> list[dict[str, Any]]:
    """Runs of an experiment: ``{"run_id", "params", "metrics": {key: [(step, value)]}}``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return []
    result = []
    for run in client.search_runs([experiment.experiment_id]):
        metrics = {key: sorted((m.step, m.value) for m in client.get_metric_history(
            run.info.run_id, key)) for key in run.data.metrics}
        result.append({"run_id": run.info.run_id, "params": dict(run.data.params),
                       "metrics": metrics, "status": run.info.status})
    return result


def read_dvclive_metrics(live_dir: str | os.PathLike[str]) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), ...]}`` from DVCLive's ``plots/metrics/*.tsv`` files."""
    metrics = {}
    root = os.path.join(os.fspath(live_dir), "plots", "metrics")
    for path in sorted(glob.glob(os.path.join(root, "**", "*.tsv"), recursive=True)):
        with open(path, encoding="utf-8") as file:
            header, *rows = [line.rstrip("\n").split("\t") for line in file if line.strip()]
        step, value = header.index("step"), len(header) - 1
        name = os.path.relpath(path, root)[:-len(".tsv")].replace(os.sep, "/")
        metrics[name] = [(int(row[step]), float(row[value])) for row in rows]
    return metrics
