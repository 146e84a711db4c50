"""read_zero_full_states refuses what it cannot rebuild, naming the way out (the real ZeRO-2
checkpoint, saved by 2 DeepSpeed processes:
tests/integration/deepspeed/test_deepspeed.py, through scripts/deepspeed_across.py)."""

from __future__ import annotations

import pytest
import torch
from accel_state import ConfigurationError


def _model_states(folder, **extra) -> None:
    torch.save({"module": {"weight": torch.ones(2)}, "param_shapes": [{"weight": (2,)}],
                **extra}, folder / "mp_rank_00_model_states.pt")


def test_layouts_it_cannot_rebuild_are_refused(tmp_path):
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed.states import read_zero_full_states

    folder = tmp_path / "ckpt" / "deepspeed" / "model"
    folder.mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="no mp_rank_00_model_states.pt and no "
                       "zero_pp_rank_0_mp_rank_00_model_states.pt.*accel merge-weights .*ckpt OUT"):
        read_zero_full_states(folder)
    _model_states(folder)
    (folder / "mp_rank_01_model_states.pt").write_bytes(b"")
    with pytest.raises(ConfigurationError, match="model-parallel"):
        read_zero_full_states(folder)
    (folder / "mp_rank_01_model_states.pt").unlink()
    for rank in (0, 2):
        (folder / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    with pytest.raises(ConfigurationError, match=r"ranks \[0, 2\]"):
        read_zero_full_states(folder)
    (folder / "zero_pp_rank_2_mp_rank_00_optim_states.pt").unlink()
    torch.save({"optimizer_state_dict": {"zero_stage": 3}},
               folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(ConfigurationError, match="ZeRO-3 partitions in a layout other than"):
        read_zero_full_states(folder)


def test_without_partitions_the_torch_optimizer_state_is_returned(tmp_path):
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed.states import read_zero_full_states

    state = {"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"params": [0]}]}
    _model_states(tmp_path, optimizer=state)
    weights, optimizer = read_zero_full_states(tmp_path)
    assert torch.equal(weights["weight"], torch.ones(2)) and optimizer["param_groups"] == [
        {"params": [0]}]


def test_files_are_unpickled_from_the_bytes_read_returns(tmp_path):
    """With ``read`` (the facade's hash-checked reader) the files are not opened again:
    what is unpickled is what ``read`` returned for each path, for the full-state reader
    and for DeepSpeed's own load_checkpoint (through the restricted checkpoint engine)."""
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed.checkpoint import _RestrictedEngine
    from accel_parallel.deepspeed.states import read_zero_full_states

    state = {"state": {}, "param_groups": [{"params": [0]}]}
    _model_states(tmp_path, optimizer=state)
    model_file = tmp_path / "mp_rank_00_model_states.pt"
    checked = {model_file: model_file.read_bytes()}
    model_file.write_bytes(b"changed after the check")  # a re-opened file would fail
    asked = []

    def read(path):
        asked.append(path)
        return checked[path]

    weights, _ = read_zero_full_states(tmp_path, read)
    assert torch.equal(weights["weight"], torch.ones(2)) and asked == [model_file]
    engine = _RestrictedEngine(object(), read)
    assert torch.equal(engine.load(model_file)["module"]["weight"], torch.ones(2))
    assert asked == [model_file, model_file]


def test_the_writer_hands_deepspeed_the_checked_reader_and_strict(tmp_path):
    """DeepSpeedWriter.load: DeepSpeed's load_checkpoint runs with the restricted engine
    holding the per-rank loader's ``read``, and ``load_module_strict`` from ``non_strict``."""
    from accel_parallel.deepspeed.checkpoint import DeepSpeedWriter, _RestrictedEngine

    class Engine:  # what the writer touches of a DeepSpeed engine
        def __init__(self) -> None:
            self.module, self.optimizer = torch.nn.Linear(2, 2), None
            self.checkpoint_engine, self.dp_world_size, self.seen = "torch's", 1, []

        def zero_optimization_stage(self) -> int:
            return 0

        def load_checkpoint(self, root, **options):
            self.seen.append((self.checkpoint_engine, options))
            return root, {}

    engine = Engine()
    (tmp_path / "deepspeed" / "model").mkdir(parents=True)
    writer = DeepSpeedWriter({"default": engine})
    assert writer.reads_verified and writer.loads_non_strict

    def read(path):
        return b""

    for non_strict, strict in (((), True), (frozenset({"model"}), False)):
        writer.load(tmp_path, {"model": engine.module}, 0, 1, read=read, non_strict=non_strict)
        used, options = engine.seen[-1]
        assert isinstance(used, _RestrictedEngine) and used._read is read
        assert options["tag"] == "model" and options["load_module_strict"] is strict
    assert engine.checkpoint_engine == "torch's"  # put back


def test_zero3_partitions_are_joined_per_parameter_and_unpadded(tmp_path):
    """ZeRO-3: each parameter takes ceil(numel / processes) values of every process's flat
    partition, the last one padded; the reader joins them in rank order, drops the padding,
    and keeps step, the hyperparameters and the loss scaler (the real 2-process files:
    tests/integration/deepspeed/test_deepspeed.py)."""
    pytest.importorskip("deepspeed")
    from accel_parallel.deepspeed.states import read_zero_checkpoint, read_zero_full_states

    flats = [torch.tensor([1.0, 2, 4, 5]), torch.tensor([3.0, 0, 6, 7])]  # a=(3,), b=(2, 2)
    shapes = [{"a": torch.Size([3]), "b": torch.Size([2, 2])}]
    for rank, flat in enumerate(flats):
        torch.save({"module": {"a": torch.empty(0), "b": torch.empty(0), "buf": torch.ones(1)},
                    "buffer_names": ["buf"], "param_shapes": shapes, "global_steps": 5},
                   tmp_path / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        torch.save({"optimizer_state_dict": {
            "zero_stage": 3, "loss_scaler": None, "overflow": False, "fp32_flat_groups": [flat],
            "optimizer_state_dict": {
                "state": {0: {"step": torch.tensor(5.0), "exp_avg": flat * 10}},
                "param_groups": [{"lr": 0.5, "params": [0]}]}}},
                   tmp_path / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    saved = read_zero_checkpoint(tmp_path)
    assert (saved.stage, saved.processes, saved.model_file["global_steps"]) == (3, 2, 5)
    assert saved.optimizer_globals == {"loss_scaler": None, "overflow": False}
    weights, optimizer = read_zero_full_states(tmp_path)
    assert torch.equal(weights["a"], torch.tensor([1.0, 2, 3]))
    assert torch.equal(weights["b"], torch.tensor([[4.0, 5], [6, 7]]))
    assert torch.equal(weights["buf"], torch.ones(1)) and set(weights) == {"a", "b", "buf"}
    assert torch.equal(optimizer["state"]["b"]["exp_avg"], weights["b"] * 10)
    assert optimizer["state"]["a"]["step"] == 5
    assert optimizer["param_groups"] == [{"lr": 0.5, "params": ["a", "b"]}]
    for rank in (1, 0):  # rank 1's partition out of step with rank 0's, then both too long
        torch.save({"optimizer_state_dict": {
            "zero_stage": 3, "fp32_flat_groups": [torch.zeros(5)],
            "optimizer_state_dict": {"state": {}, "param_groups": [{"params": [0]}]}}},
            tmp_path / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
        match = ("differ between processes" if rank else
                 "group 0 holding 5 values per process where its parameters take 4")
        with pytest.raises(ConfigurationError, match=match):
            read_zero_checkpoint(tmp_path)
