"""File names of accel checkpoints and of Accelerate's on-disk weight layout.

The weight names (``model.safetensors``, ``model.safetensors.index.json``, ...) are the
Hugging Face ones so ``save_model`` output loads in transformers and friends; the
Accelerate-era pickle names (``optimizer.bin``, ``random_states_{i}.pkl``) are kept as
constants for scripts that import them, but accel never writes or reads those pickles.
"""

from __future__ import annotations

#: Name and version of the manifest format written by this package.
MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "accel-checkpoint"
#: 4: file records name their digest algorithm (xxh3-128 by default, or sha256);
#: 3: the manifest carries its own digest (``manifest_sha256``); 2: per-chunk digests
#: (HASH_CHUNK); 1: whole-file sha256. Every older format is still read (1 and 2 have
#: no self-digest; 1 to 3 hold sha256 records only).
FORMAT_VERSION = 4
#: The first format whose manifests must carry their own digest.
SEALED_FORMAT_VERSION = 3
#: Key of the manifest's own digest: sha256 of its canonical JSON without this key.
MANIFEST_DIGEST_KEY = "manifest_sha256"
#: Infix of the temporary sibling directory a save writes into before the atomic rename.
TMP_INFIX = ".tmp-"
#: Infix of the directory an overwritten checkpoint is parked in during the swap.
OLD_INFIX = ".old-"
#: Infix a rotated-out checkpoint is renamed to before it is deleted.
TRASH_INFIX = ".deleting-"
#: Every infix of a folder a save or rotation works in: never loaded, cleaned when unheld.
LEFTOVER_INFIXES = (TMP_INFIX, OLD_INFIX, TRASH_INFIX)

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
SAFE_WEIGHTS_PATTERN_NAME = "model{suffix}.safetensors"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
WEIGHTS_PATTERN_NAME = "pytorch_model{suffix}.bin"
MODEL_NAME = "pytorch_model"
SAFE_MODEL_NAME = "model"
OPTIMIZER_NAME = "optimizer"
SCHEDULER_NAME = "scheduler"
SAMPLER_NAME = "sampler"
SCALER_NAME = "scaler.pt"
RNG_STATE_NAME = "random_states"
PROFILE_PATTERN_NAME = "profile_{suffix}.json"
FSDP_MODEL_NAME = "pytorch_model_fsdp"
DATALOADER_NAME = "dataloader"
CUSTOM_NAME = "custom_checkpoint"
