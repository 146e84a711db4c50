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
    with pytest.raises(ConfigurationError, match="no mp_rank_00_model_states.pt .*ZeRO-3.*"
                                                 "accel merge-weights .*ckpt OUT"):
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
