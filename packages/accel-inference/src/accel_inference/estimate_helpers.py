"""The steps of Accelerate's ``estimate-memory`` under its names (``accelerate.commands.estimate``).

Scripts and apps built on Accelerate's command (its Gradio Space, notebooks) call these:
``create_empty_model`` (a model on ``meta``), ``gather_data`` (the table rows),
``estimate_training_usage`` (Accelerate's Adam rule of thumb), ``create_ascii_table``
(the boxed table), and the Hub helpers ``verify_on_hub``/``check_has_model``/
``add_timm_hub_prefix``. `accel estimate-memory` itself prints accel's fuller report
(:mod:`accel_inference.cli_estimate`); these keep Accelerate's contracts and numbers.
"""

from __future__ import annotations

import argparse
from typing import Any

from accel_state.errors import ConfigurationError, MissingDependencyError

__all__ = ["add_timm_hub_prefix", "check_has_model", "create_ascii_table",
           "create_empty_model", "estimate_training_usage", "gather_data", "verify_on_hub"]


def verify_on_hub(repo: str, token: str | None = None) -> Any:
    """The Hub's model info for ``repo``; ``"gated"`` when access is refused, ``"repo"``
    when there is no such repository (Accelerate's answers). Without network access (or
    with ``HF_HUB_OFFLINE=1``) it raises ``ConnectionError`` saying so."""
    try:
        import huggingface_hub
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError:
        raise MissingDependencyError("huggingface_hub", feature="verify_on_hub") from None
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise ConnectionError(f"cannot look up {repo!r} on the Hugging Face Hub: HF_HUB_OFFLINE "
                              "is set. Unset it, or pass a local folder with a config.json.")
    try:
        return huggingface_hub.model_info(repo, token=token)
    except GatedRepoError:
        return "gated"
    except RepositoryNotFoundError:
        return "repo"
    except OSError as error:  # no route to the Hub (requests' errors are OSErrors)
        if "gated" in str(error).lower():
            return "gated"
        raise ConnectionError(f"cannot reach the Hugging Face Hub to look up {repo!r} "
                              f"({type(error).__name__}: {error}). Check the network, or pass a "
                              "local folder with a config.json.") from error


def check_has_model(error: BaseException) -> str:
    """Which library failed to find a model in a repo: ``"timm"``, ``"transformers"`` or
    ``"unknown"``, told from the error's type and message as Accelerate tells them."""
    message = str(error)
    timm_like = (isinstance(error, RuntimeError) and "Unknown model" in message) \
        or type(error).__name__ == "EntryNotFoundError" \
        or (isinstance(error, KeyError) and "architecture" in message)
    if timm_like:
        return "timm"
    transformers_like = isinstance(error, (OSError, ValueError)) and (
        "does not appear to have a file named" in message or "Unrecognized model in" in message)
    return "transformers" if transformers_like else "unknown"


def add_timm_hub_prefix(model_name: str) -> str:
    """``org/name`` becomes ``hf-hub:org/name`` (what ``timm.create_model`` needs for a Hub
    repo); a bare architecture or an already prefixed name is returned as it is."""
    if ":" in model_name or "/" not in model_name:
        return model_name
    return f"hf-hub:{model_name}"


def create_empty_model(model_name: str, library_name: str | None,
                       trust_remote_code: bool = False, access_token: str | None = None) -> Any:
    """``model_name`` built on the ``meta`` device (no memory, no weights downloaded): a
    local folder with a config.json, a ``module:factory``, or a Hub name with
    ``library_name`` ``"transformers"``/``"timm"`` (the Hub token comes from the login)."""
    from accel_inference.model_specs import build_model

    if access_token is not None:
        raise ConfigurationError(
            "create_empty_model(access_token=...) is not supported: transformers and timm read "
            "the Hub token themselves; log in with `hf auth login` (or export HF_TOKEN).")
    if library_name == "timm":
        model_name = add_timm_hub_prefix(model_name)
    return build_model(model_name, library_name, trust_remote_code, empty=True)


def estimate_training_usage(bytes: int, mixed_precision: str,  # noqa: A002 - Accelerate's name
                            msamp_config: str | None = None) -> dict[str, int]:
    """Accelerate's rule of thumb for training with Adam, from the float32 size ``bytes``:
    model, gradients, optimizer states and step peak (-1 where it has none: int8/int4)."""
    sizes = {"model": -1, "optimizer": -1, "gradients": -1, "step": -1}
    if mixed_precision == "float32":
        sizes.update(model=bytes, gradients=bytes, optimizer=2 * bytes, step=4 * bytes)
    elif mixed_precision in ("float16", "bfloat16") or (
            mixed_precision == "fp8" and msamp_config is None):
        # fp32 master weights, fp32 + half gradients, two fp32 Adam moments
        sizes.update(model=bytes, gradients=bytes + bytes // 2, optimizer=2 * bytes,
                     step=2 * bytes)
    return sizes


#: float32 size / size in each dtype (Accelerate leaves bfloat16 at float32's size; it is
#: two bytes a parameter like float16)
_DIVISOR = {"float32": 1, "float16": 2, "bfloat16": 2, "int8": 4, "int4": 8}


def gather_data(args: argparse.Namespace) -> list[list[Any]]:
    """One row per ``args.dtypes``: ``[dtype, largest layer, total size, training usage]``
    (bytes; the usage a dict from :func:`estimate_training_usage`), for ``args.model_name``
    built empty (``args.library_name``, ``args.trust_remote_code``)."""
    from accel_inference.sizing import calculate_maximum_sizes

    try:
        model = create_empty_model(args.model_name, library_name=args.library_name,
                                   trust_remote_code=args.trust_remote_code)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        library = check_has_model(error)
        if library != "unknown":
            raise RuntimeError(
                f"Tried to load `{args.model_name}` with `{library}` but a possible model to "
                "load was not found inside the repo.") from error
        raise
    total, (largest, _) = calculate_maximum_sizes(model)
    rows = []
    for dtype in args.dtypes:
        if dtype not in _DIVISOR:
            raise ConfigurationError(f"dtype {dtype!r}: use one of {', '.join(_DIVISOR)}.")
        divisor = _DIVISOR[dtype]
        rows.append([dtype, largest / divisor, total / divisor,
                     estimate_training_usage(total, dtype)])
    return rows


def create_ascii_table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """A boxed table (box-drawing characters) with ``title`` on top, cells centred; the
    last column widens when the title is longer than the columns."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"every row needs {len(headers)} cells (one per header), got "
                         f"{[len(row) for row in rows]}")
    widths = [max(len(str(cell)) for cell in (header, *(row[i] for row in rows)))
              for i, header in enumerate(headers)]
    inner = sum(widths) + len(widths) - 1
    if len(title) > inner:
        widths[-1] += len(title) - inner
        inner = len(title)

    def line(left: str, joint: str, right: str) -> str:
        return left + joint.join("─" * w for w in widths) + right

    def cells(values: list[Any]) -> str:
        return "│" + "│".join(str(v).center(w) for v, w in zip(values, widths)) + "│"

    out = ["┌" + "─" * inner + "┐", "│" + title.center(inner) + "│", line("├", "┬", "┤"),
           cells(headers), line("├", "┼", "┤"), *(cells(row) for row in rows),
           line("└", "┴", "┘")]
    return "\n".join(out)
