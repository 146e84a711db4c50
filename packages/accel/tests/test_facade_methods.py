"""Single-process behaviour of the Accelerator's Accelerate methods: triggers, profile() and
ProfileKwargs, the kwargs-handler attributes, verify_device_map, lomo_backward, the topology
properties and unknown constructor arguments.

With 2 processes: tests/integration/test_facade_methods.py."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap

import pytest
import torch
from accel import (
    Accelerator,
    AutocastKwargs,
    DistributedDataParallelKwargs,
    DistributedType,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from accel_state import ConfigurationError, MissingDependencyError
from torch import nn


def _train_step(model: nn.Module) -> None:
    model(torch.randn(4, 8)).sum().backward()


# -- triggers -------------------------------------------------------------------------------
def test_check_trigger_reports_a_set_trigger_once():
    accelerator = Accelerator(cpu=True)
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False  # cleared by the check


def test_trigger_sync_in_backward_is_a_no_op_in_one_process():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(8, 1))
    with accelerator.no_sync(model):
        loss = model(torch.randn(4, 8)).sum()
    with accelerator.trigger_sync_in_backward(model):
        accelerator.backward(loss)
    assert model.weight.grad is not None


# -- profile() and ProfileKwargs ----------------------------------------------------------------
def test_profile_writes_a_chrome_trace_of_the_block(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(8, 8)
    handler = ProfileKwargs(activities=["cpu"], record_shapes=True, output_trace_dir=tmp_path)
    with accelerator.profile(handler) as profiler:
        _train_step(model)
    assert isinstance(profiler, torch.profiler.profile)
    assert [p.name for p in tmp_path.iterdir()] == ["profile_0.json"]
    events = json.loads((tmp_path / "profile_0.json").read_text())["traceEvents"]
    addmm = [e for e in events if e.get("name") == "aten::addmm"]
    assert addmm and "Input Dims" in addmm[0]["args"]  # record_shapes reached torch


def test_profile_uses_the_accelerators_handler_unless_given_one(tmp_path):
    default_dir, override_dir = tmp_path / "default", tmp_path / "override"
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(default_dir))
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    assert accelerator.profile_handler is handler
    with accelerator.profile():
        _train_step(nn.Linear(8, 8))
    assert (default_dir / "profile_0.json").is_file()
    with accelerator.profile(ProfileKwargs(activities=["cpu"], output_trace_dir=override_dir)):
        _train_step(nn.Linear(8, 8))
    assert (override_dir / "profile_0.json").is_file()
    with accelerator.profile(ProfileKwargs(activities=["cpu"])) as profiler:  # no directory
        _train_step(nn.Linear(8, 8))
    assert any(e.key == "aten::addmm" for e in profiler.key_averages())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default", "override"]


def test_profile_with_a_schedule_calls_on_trace_ready(tmp_path):
    ready = []
    handler = ProfileKwargs(activities=["cpu"], on_trace_ready=ready.append,
                            schedule_option={"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
                            output_trace_dir=tmp_path)
    accelerator = Accelerator(cpu=True)
    with accelerator.profile(handler) as profiler:
        for _ in range(5):
            _train_step(nn.Linear(8, 8))
            profiler.step()
    assert ready == [profiler]  # one cycle of 2 active steps
    assert (tmp_path / "profile_0.json").is_file()


def test_profile_warns_when_the_schedule_recorded_nothing(tmp_path):
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=tmp_path,
                            schedule_option={"wait": 5, "warmup": 1, "active": 1})
    with pytest.warns(UserWarning, match="never recorded a step"):
        with Accelerator(cpu=True).profile(handler) as profiler:
            profiler.step()
    assert list(tmp_path.iterdir()) == []


def test_profile_kwargs_build_passes_every_option():
    handler = ProfileKwargs(activities=["cpu"], record_shapes=True, profile_memory=True,
                            with_stack=True, with_flops=True, with_modules=True,
                            schedule_option={"wait": 0, "warmup": 1, "active": 1})
    profiler = handler.build()
    assert isinstance(profiler, torch.profiler.profile)
    assert profiler.activities == {torch.profiler.ProfilerActivity.CPU}
    assert (profiler.record_shapes, profiler.profile_memory, profiler.with_stack,
            profiler.with_flops, profiler.with_modules) == (True, True, True, True, True)
    assert profiler.schedule(0) == torch.profiler.ProfilerAction.WARMUP
    assert profiler.schedule(1) == torch.profiler.ProfilerAction.RECORD_AND_SAVE
    assert ProfileKwargs().to_kwargs() == {}
    assert ProfileKwargs(with_flops=True).to_kwargs() == {"with_flops": True}


def test_profile_kwargs_schedule_keys_match_torch():
    from accel._profiling import _SCHEDULE_OPTIONAL, _SCHEDULE_REQUIRED

    parameters = inspect.signature(torch.profiler.schedule).parameters
    required = {n for n, p in parameters.items() if p.default is inspect.Parameter.empty}
    assert set(_SCHEDULE_REQUIRED) == required
    assert set(_SCHEDULE_OPTIONAL) <= set(parameters) - required


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"activities": ["cpu", "gpu"]}, r"unknown activity 'gpu'; valid activities are 'cpu', "
                                     r"'cuda', 'xpu', 'mtia', 'hpu'"),
    ({"schedule_option": {"wait": 1, "warmup": 1, "active": 1, "cycles": 2}},
     "unknown key 'cycles'"),
    ({"schedule_option": {"wait": 1, "active": 1}}, "lacks warmup"),
    ({"schedule_option": {"wait": -1, "warmup": 0, "active": 1}}, "integer >= 0"),
    ({"schedule_option": [1, 1, 1]}, "must be a dict"),
    ({"on_trace_ready": "trace.json"}, "must be a callable"),
])
def test_profile_kwargs_refuse_bad_values(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        ProfileKwargs(**kwargs)


def test_profile_refuses_a_handler_of_another_kind():
    with pytest.raises(ConfigurationError, match="must be a ProfileKwargs"):
        with Accelerator(cpu=True).profile(AutocastKwargs()):
            pass


def test_profile_kwargs_is_exported_like_accelerate():
    import accel
    import accel.utils
    import accel.utils.dataclasses

    assert accel.ProfileKwargs is accel.utils.ProfileKwargs is accel.utils.dataclasses.ProfileKwargs
    assert "ProfileKwargs" in accel.__all__


# -- kwargs-handler attributes ---------------------------------------------------------------
def test_handler_attributes_hold_the_handlers_passed():
    handlers = {"ddp_handler": DistributedDataParallelKwargs(bucket_cap_mb=10),
                "scaler_handler": GradScalerKwargs(init_scale=1024.0),
                "init_handler": InitProcessGroupKwargs(timeout=600),
                "autocast_handler": AutocastKwargs(cache_enabled=False),
                "profile_handler": ProfileKwargs(with_flops=True)}
    with pytest.warns(UserWarning, match="GradScalerKwargs is ignored"):  # no fp16 here
        accelerator = Accelerator(cpu=True, kwargs_handlers=list(handlers.values()))
    for attribute, handler in handlers.items():
        assert getattr(accelerator, attribute) is handler, attribute
    for attribute in ("ao_recipe_handler", "te_recipe_handler", "fp8_recipe_handler",
                      "msamp_recipe_handler"):
        assert getattr(accelerator, attribute) is None, attribute
    assert accelerator.has_fp8_handler is False


def test_handler_attributes_are_none_without_handlers():
    accelerator = Accelerator(cpu=True)
    for attribute in ("ddp_handler", "scaler_handler", "init_handler", "autocast_handler",
                      "profile_handler", "ao_recipe_handler", "te_recipe_handler",
                      "fp8_recipe_handler", "msamp_recipe_handler"):
        assert getattr(accelerator, attribute) is None, attribute


def test_recipe_handler_attributes():
    from accel_precision import AORecipeKwargs, FP8RecipeKwargs, TERecipeKwargs

    ao = AORecipeKwargs()
    with pytest.warns(UserWarning, match="ignored"):  # fp8 recipe without mixed_precision=fp8
        accelerator = Accelerator(cpu=True, kwargs_handlers=[ao])
    assert accelerator.ao_recipe_handler is ao and accelerator.has_fp8_handler
    from accel._handlers import HandlersMixin
    from accel._resolve import collect_handlers

    class _View(HandlersMixin):
        def __init__(self, handlers):
            self._handlers = collect_handlers(handlers)

    te = TERecipeKwargs()
    assert _View([te]).te_recipe_handler is te and _View([te]).fp8_recipe_handler is None
    with pytest.warns(FutureWarning):
        fp8 = FP8RecipeKwargs()
    assert _View([fp8]).fp8_recipe_handler is fp8 and _View([fp8]).te_recipe_handler is None


def test_two_profile_handlers_are_refused():
    with pytest.raises(ConfigurationError, match="more than one ProfileKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(), ProfileKwargs(with_stack=True)])


# -- verify_device_map ---------------------------------------------------------------------------
def test_verify_device_map_and_single_process_prepare():
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    assert accelerator.verify_device_map(model) is False
    model[1].hf_device_map = {"": "cpu"}  # one device: not dispatched
    assert accelerator.verify_device_map(model) is False
    model[1].hf_device_map = {"0": "cpu", "1": "disk"}  # a submodule split over two
    assert accelerator.verify_device_map(model) is True
    assert accelerator.prepare(model) is model  # one process: allowed, as in Accelerate


def test_dispatched_model_is_refused_in_a_distributed_run(monkeypatch):
    from accel._device_map import refuse_dispatched_models

    class _Strategy:  # what the check asks the strategy, as a 2-process run answers
        runs_distributed = True

    class _Distributed:  # and what its message names
        strategy, distributed_type, num_processes = _Strategy(), DistributedType.MULTI_CPU, 2

    model = nn.Linear(4, 4)
    model.hf_device_map = {"0": "cpu", "1": "disk"}
    with pytest.raises(ConfigurationError, match=r"hf_device_map=\{'0': 'cpu', '1': 'disk'\}"):
        refuse_dispatched_models(_Distributed(), [model])
    monkeypatch.setenv("ACCEL_BYPASS_DEVICE_MAP", "true")
    refuse_dispatched_models(_Distributed(), [model])
    monkeypatch.setenv("ACCEL_BYPASS_DEVICE_MAP", "sometimes")
    with pytest.raises(ConfigurationError, match="ACCEL_BYPASS_DEVICE_MAP='sometimes'"):
        refuse_dispatched_models(_Distributed(), [model])


# -- lomo_backward -------------------------------------------------------------------------------
_STAND_IN_LOMO = '''
"""A stand-in for lomo-optim (its real package needs transformers): the same class names and
the fused_backward(loss, lr) entry point, implemented as backward + SGD."""
import torch


class Lomo(torch.optim.Optimizer):
    def __init__(self, model, lr=1e-3):
        self.model, self.calls = model, []
        super().__init__(model.parameters(), {"lr": lr})

    def fused_backward(self, loss, lr):
        loss.backward()
        with torch.no_grad():
            for p in self.model.parameters():
                p -= lr * p.grad
                p.grad = None
        self.calls.append(lr)


class AdaLomo(Lomo):
    pass
'''


@pytest.fixture
def lomo_optim(tmp_path, monkeypatch):
    """An installed ``lomo_optim`` distribution (package + dist-info) on sys.path."""
    (tmp_path / "lomo_optim").mkdir()
    (tmp_path / "lomo_optim" / "__init__.py").write_text(textwrap.dedent(_STAND_IN_LOMO))
    info = tmp_path / "lomo_optim-0.1.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lomo-optim\nVersion: 0.1.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield __import__("lomo_optim")
    monkeypatch.delitem(sys.modules, "lomo_optim", raising=False)


def test_lomo_backward_without_lomo_optim_names_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "lomo_optim", None)  # not importable, whatever is installed
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    with pytest.raises(MissingDependencyError, match="pip install lomo-optim"):
        accelerator.lomo_backward(model(torch.randn(4, 8)).sum(), 0.1)


def test_lomo_backward_refuses_other_optimizers(lomo_optim):
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert accelerator.has_lomo_optimizer is False
    with pytest.raises(ConfigurationError, match=r"no LOMO optimizer among the prepared ones "
                                                 r"\(SGD\)"):
        accelerator.lomo_backward(model(torch.randn(4, 8)).sum(), 0.1)


def test_lomo_backward_runs_the_fused_update(lomo_optim):
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, optimizer = accelerator.prepare(model, lomo_optim.AdaLomo(model, lr=0.1))
    assert accelerator.has_lomo_optimizer is True
    before = model.weight.detach().clone()
    accelerator.lomo_backward(model(torch.randn(4, 8)).sum(), 0.5)
    assert optimizer.optimizer.calls == [0.5]
    assert not torch.equal(model.weight, before) and model.weight.grad is None
    # Accelerate's spelling: backward(loss, learning_rate=...) with a LOMO optimizer
    accelerator.backward(model(torch.randn(4, 8)).sum(), learning_rate=0.25)
    assert optimizer.optimizer.calls == [0.5, 0.25]
    with pytest.raises(ConfigurationError, match="need the learning rate"):
        accelerator.lomo_backward(model(torch.randn(4, 8)).sum(), None)


# -- topology properties in one process --------------------------------------------------------
def test_single_process_topology_properties():
    accelerator = Accelerator(cpu=True)
    assert accelerator.multi_device is False and accelerator.use_distributed is False
    assert accelerator.should_save_model is True
    assert accelerator.is_fsdp2 is False and accelerator.is_composable_parallelism_enabled is False
    assert accelerator.torch_device_mesh is None and accelerator.parallelism_config is None
    assert (accelerator.data_parallel_rank, accelerator.data_parallel_shard_rank,
            accelerator.tensor_parallel_rank, accelerator.context_parallel_rank,
            accelerator.pipeline_parallel_rank) == (0, 0, 0, 0, 0)


# -- unknown constructor arguments -------------------------------------------------------------
def test_a_misspelt_argument_names_the_closest_valid_one():
    with pytest.raises(TypeError, match=r"'mixed_precison' \(did you mean 'mixed_precision'\?\)"):
        Accelerator(mixed_precison="bf16")
    with pytest.raises(TypeError, match=r"'gradient_accumulation_step' \(did you mean "
                                        r"'gradient_accumulation_steps'\?\)"):
        Accelerator(cpu=True, gradient_accumulation_step=2)


def test_unknown_arguments_list_the_valid_ones_and_moved_ones_say_where():
    with pytest.raises(TypeError, match=r"argument 'banana'; its arguments are: "
                                        r"device_placement, .*mixed_precision"):
        Accelerator(banana=1)
    with pytest.raises(TypeError, match=r"'dispatch_batches' \(pass dataloader_config="
                                        r"DataLoaderConfiguration\(dispatch_batches=\.\.\.\)\)"):
        Accelerator(dispatch_batches=True)
    with pytest.raises(TypeError, match=r"arguments 'cpus' \(did you mean 'cpu'\?\), 'lr'"):
        Accelerator(cpus=True, lr=0.1)


def test_megatron_lm_plugin_is_accepted_as_none_and_refused_otherwise():
    assert Accelerator(cpu=True, megatron_lm_plugin=None).distributed_type is DistributedType.NO
    with pytest.raises(ConfigurationError,
                       match=r"megatron_lm_plugin=.*ParallelismConfig\(tp_size"):
        Accelerator(cpu=True, megatron_lm_plugin=object())
