"""Read back what the trackers wrote, from the files alone (tests, offline checks).

Each reader imports its backend lazily and returns plain Python data, so a test can
assert on a real run without mocking the SDK.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import time
import zipfile
from typing import Any

__all__ = ["read_tensorboard_scalars", "read_wandb_offline_runs", "read_mlflow_runs",
           "read_dvclive_metrics", "read_comet_offline_archives", "read_clearml_offline_session"]

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
        if (kind == 0 and length == 0) or pos + 7 + length > len(data):
            break  # the end of what the writer has written so far
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            records.append(pending)
            pending = b""
    return records


def read_wandb_offline_runs(wandb_dir: str | os.PathLike[str],
                            timeout: float = 60.0) -> list[dict[str, Any]]:
    """Each ``offline-run-*`` under ``wandb_dir``: ``{"dir", "id", "config", "history"}``.

    ``history`` is the list of rows logged (user keys plus wandb's ``_step``...),
    ``config`` the stored configuration (values decoded from JSON).

    wandb's service process writes the run file behind ``run.finish()``; on a loaded
    machine the file can still be incomplete when ``finish`` returns. So each file is
    read once it holds the run's closing ``exit`` record, waiting up to ``timeout``
    seconds, and a file that never gets one is an error naming what it does hold.
    """
    runs = []
    for run_dir in sorted(glob.glob(os.path.join(os.fspath(wandb_dir), "offline-run-*"))):
        config: dict[str, Any] = {}
        history: list[dict[str, Any]] = []
        files = glob.glob(os.path.join(run_dir, "*.wandb"))
        for record in _finished_wandb_records(files[0], timeout) if files else []:
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


def _finished_wandb_records(path: str, timeout: float) -> list[Any]:
    """The parsed records of a run file, once its ``exit`` record is there."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + timeout
    while True:
        records = []
        for payload in _wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            records.append(record)
        kinds = [record.WhichOneof("record_type") for record in records]
        if "exit" in kinds:
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} has no 'exit' record after {timeout:.0f} s, so wandb "
                               f"has not finished writing it; it holds {kinds}.")
        time.sleep(0.1)


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


def read_dvclive_metrics(live_dir: str | os.PathLike[str]
                         ) -> dict[str, list[tuple[int, float | str]]]:
    """``{metric: [(step, value), ...]}`` from DVCLive's ``plots/metrics/*.tsv`` files
    (a value that is not a number, such as a logged string, stays a string)."""
    metrics = {}
    root = os.path.join(os.fspath(live_dir), "plots", "metrics")
    for path in sorted(glob.glob(os.path.join(root, "**", "*.tsv"), recursive=True)):
        with open(path, encoding="utf-8") as file:
            header, *rows = [line.rstrip("\n").split("\t") for line in file if line.strip()]
        step, value = header.index("step"), len(header) - 1
        name = os.path.relpath(path, root)[:-len(".tsv")].replace(os.sep, "/")
        metrics[name] = [(int(row[step]), _number_or_text(row[value])) for row in rows]
    return metrics


def _number_or_text(cell: str) -> float | str:
    try:
        return float(cell)
    except ValueError:
        return cell


def _archive_text(path: str, member: str) -> str:
    """``member`` of a zip archive or of a folder, as text."""
    if os.path.isdir(path):
        with open(os.path.join(path, member), encoding="utf-8") as file:
            return file.read()
    with zipfile.ZipFile(path) as archive:
        return archive.read(member).decode("utf-8")


def read_comet_offline_archives(offline_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Each Comet offline archive (``*.zip``) in ``offline_dir``, oldest first.

    ``{"path", "offline_id", "project_name", "parameters": {name: value},
    "metrics": {name: [(step, value), ...]}, "others": {key: value}}``; nested
    parameters keep Comet's ``outer|inner`` names.
    """
    archives = sorted(glob.glob(os.path.join(os.fspath(offline_dir), "*.zip")),
                      key=os.path.getmtime)
    result = []
    for path in archives:
        experiment = json.loads(_archive_text(path, "experiment.json"))
        found: dict[str, Any] = {"path": path, "offline_id": experiment.get("offline_id"),
                                 "project_name": experiment.get("project_name"),
                                 "parameters": {}, "metrics": {}, "others": {}}
        for line in _archive_text(path, "messages.json").splitlines():
            if not line.strip():
                continue
            message = json.loads(line)
            payload = message.get("payload", {})
            if message.get("type") == "metric_msg":
                metric = payload["metric"]
                found["metrics"].setdefault(metric["metricName"], []).append(
                    (metric["step"], metric["metricValue"]))
            elif message.get("type") == "parameter_msg":
                param = payload.get("param") or payload.get("params") or {}
                found["parameters"][param["paramName"]] = param["paramValue"]
            elif message.get("type") == "log_other":
                found["others"][payload["key"]] = payload["value"]
        result.append(found)
    return result


_CLEARML_SINGLE_VALUE_ITERATION = -2**31  # where report_single_value puts its values


def read_clearml_offline_session(session: str | os.PathLike[str]) -> dict[str, Any]:
    """A ClearML offline session (its folder or its ``.zip``).

    ``{"id", "name", "project", "configuration": {name: dict or text},
    "scalars": {title: {series: [(iteration, value), ...]}}, "single_values": {name: value}}``.
    Configuration dictionaries are HOCON text in the session; they are parsed with
    ClearML's own parser.
    """
    path = os.fspath(session)
    task = json.loads(_archive_text(path, "task.json"))
    scalars: dict[str, dict[str, list[tuple[int, float]]]] = {}
    single_values: dict[str, float] = {}
    for line in _archive_text(path, "metrics.jsonl").splitlines():
        if not line.strip():
            continue
        batch = json.loads(line)
        for event in batch if isinstance(batch, list) else [batch]:
            if event.get("type") != "training_stats_scalar":
                continue
            if event["iter"] == _CLEARML_SINGLE_VALUE_ITERATION:
                single_values[event["variant"]] = event["value"]
            else:
                scalars.setdefault(event["metric"], {}).setdefault(event["variant"], []).append(
                    (event["iter"], event["value"]))
    configuration = {}
    for name, item in (task.get("configuration") or {}).items():
        value = item.get("value")
        if item.get("type") == "dictionary" and isinstance(value, str):
            from clearml.utilities.config import text_to_config_dict

            value = json.loads(json.dumps(text_to_config_dict(value)))
        configuration[name] = value
    return {"id": task.get("id"), "name": task.get("name"), "project": task.get("project_name"),
            "configuration": configuration, "scalars": scalars, "single_values": single_values}
