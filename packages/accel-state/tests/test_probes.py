"""Accelerate's full set of availability probes (``accelerate.utils.imports``): each answers a
bool from package metadata, without importing the package or initialising CUDA, and tracks
what is really installed; ``torchao_required`` turns a missing torchao into the install line."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from accel_state import MissingDependencyError, imports

PROBES = [name for name in imports.__all__
          if name.startswith("is_")
          and name not in ("is_torch_version", "is_package_available", "is_peft_model")]


@pytest.mark.parametrize("name", PROBES)
def test_probe_answers_a_bool(name):
    assert isinstance(getattr(imports, name)(), bool)


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize(("probe", "dist"), [
    ("is_pytest_available", "pytest"), ("is_transformers_available", "transformers"),
    ("is_peft_available", "peft"), ("is_pandas_available", "pandas"),
    ("is_timm_available", "timm"), ("is_bnb_available", "bitsandbytes"),
    ("is_torchvision_available", "torchvision"), ("is_datasets_available", "datasets"),
])
def test_probe_follows_the_installed_distribution(probe, dist):
    assert getattr(imports, probe)() is _installed(dist)


def test_vendor_device_probes_are_false_without_their_extension():
    # this test machine has no Cambricon/Moore Threads/Gaudi/Neuron/XLA torch extension
    for probe in ("is_mlu_available", "is_musa_available", "is_sdaa_available",
                  "is_hpu_available", "is_habana_gaudi1", "is_neuron_available",
                  "is_torch_xla_available"):
        assert getattr(imports, probe)() is False, probe
    assert imports.is_torch_xla_available(check_is_tpu=True) is False


def test_version_gated_probes():
    assert imports.is_weights_only_available() is imports.is_torch_version(">=", "2.4.0")
    assert imports.is_pippy_available() is imports.is_torch_version(">=", "2.4.0")
    assert imports.is_4bit_bnb_available() is (
        _installed("bitsandbytes") and imports.compare_versions("bitsandbytes", ">=", "0.39.0"))
    assert imports.is_fp8_available() is (imports.is_transformer_engine_available()
                                          or imports.is_msamp_available()
                                          or imports.is_torchao_available())


def test_probes_import_nothing_and_leave_cuda_alone():
    """Fork-safety: calling every probe initialises no CUDA context and imports none of the
    packages probed (transformers, pandas, ...)."""
    code = (
        "import sys, torch\nfrom accel_state import imports\n"
        f"for name in {PROBES!r}:\n    getattr(imports, name)()\n"
        "heavy = {'transformers', 'pandas', 'datasets', 'peft', 'timm', 'matplotlib', "
        "'deepspeed', 'boto3'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
        "assert not torch.cuda.is_initialized()\nprint('PROBES-OK')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "PROBES-OK" in result.stdout, result.stderr[-2000:]


def test_torchao_required(monkeypatch):
    @imports.torchao_required
    def quantise(x):
        """Docstring kept."""
        return x * 2

    assert quantise.__name__ == "quantise" and quantise.__doc__ == "Docstring kept."
    monkeypatch.setattr(imports, "is_torchao_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r'accel\[torchao\]') as info:
        quantise(2)
    assert "quantise" in str(info.value)
    monkeypatch.setattr(imports, "is_torchao_available", lambda: True)
    assert quantise(2) == 4


def test_is_peft_model_recognises_peft_models_without_importing_peft(monkeypatch):
    import types

    from torch import nn

    monkeypatch.delitem(sys.modules, "peft", raising=False)
    assert imports.is_peft_model(nn.Linear(1, 1)) is False
    assert "peft" not in sys.modules  # answered without importing it

    class PeftModel(nn.Module):  # stands in for peft's class (peft is not a test dependency)
        pass

    monkeypatch.setitem(sys.modules, "peft", types.SimpleNamespace(PeftModel=PeftModel))
    assert imports.is_peft_model(PeftModel()) is True
    assert imports.is_peft_model(nn.Linear(1, 1)) is False
