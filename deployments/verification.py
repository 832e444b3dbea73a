"""Verifying a model folder before it is served: what a worker needs of it, and its checksum.

``verify_model_folder`` is the step of registration (``deployments.registration``) that decides whether a
deployment becomes ``ready``: it raises :class:`RegistrationError` naming the first thing that is missing or broken.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.errors import DomainError
from deployments.embedding_model import EmbeddingModelError, probe
from deployments.model_files import READY_MARKER
from deployments.models import DeploymentKind

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
_CHUNK = 1 << 20


class RegistrationError(DomainError):
    """The deployment cannot be registered or verified; the message says what to fix."""

    code = "registration_failed"


def verify_model_folder(folder: Path, *, kind: str = DeploymentKind.GENERATE) -> str:
    """The SHA-256 of ``folder`` once it passes what a worker needs of it: a config with ``architectures`` and
    ``model_type``, a tokenizer that loads with a chat template that renders, and weights that open; for an
    ``embed`` deployment, a tokenizer (no chat template) and a load check that embeds a probe sentence instead.

    Raises :class:`RegistrationError` naming the first thing that is missing or broken.
    """
    if not folder.is_dir():
        raise RegistrationError(f"{folder} is not a folder: give a Hugging Face model folder.")
    _check_config(folder)
    _check_tokenizer(folder, chat=kind == DeploymentKind.GENERATE)
    _check_weights(folder)
    if kind == DeploymentKind.EMBED:
        try:
            probe(folder)
        except EmbeddingModelError as exc:
            raise RegistrationError(f"{folder} does not serve embeddings: {exc}.") from exc
    return folder_checksum(folder)


def _check_config(folder: Path) -> None:
    path = folder / "config.json"
    if not path.is_file():
        raise RegistrationError(f"{folder} has no config.json: a Hugging Face model folder needs one.")
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RegistrationError(f"{path} is not valid JSON ({exc}): fix or replace it.") from exc
    from transformers import AutoConfig  # seconds to import, and only registration needs it in the web process

    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; each is a bad config
        raise RegistrationError(f"{path} does not load as a model config ({exc.__class__.__name__}: {exc}).") from exc
    if not getattr(config, "architectures", None):
        raise RegistrationError(f"{path} names no 'architectures' (vLLM picks the model class from it).")
    if not getattr(config, "model_type", ""):
        raise RegistrationError(f"{path} has no 'model_type'.")


def _check_tokenizer(folder: Path, *, chat: bool) -> None:
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise RegistrationError(
            f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): copy them from the model's repository."
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # as above
        raise RegistrationError(f"The tokenizer in {folder} does not load ({exc.__class__.__name__}: {exc}).") from exc
    if not chat:
        return
    if not getattr(tokenizer, "chat_template", None):
        raise RegistrationError(
            f"The tokenizer in {folder} has no chat template (chat_template.jinja, or 'chat_template' in "
            "tokenizer_config.json): every chat prompt is rendered with it."
        )
    try:
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # a template error is any exception jinja raises
        raise RegistrationError(
            f"The chat template in {folder} does not render a user message ({exc.__class__.__name__}: {exc})."
        ) from exc


def _check_weights(folder: Path) -> None:
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        if any(folder.glob("pytorch_model*.bin")):
            return
        raise RegistrationError(f"{folder} holds no weights: no *.safetensors (nor pytorch_model*.bin) file.")
    from safetensors import safe_open

    tensors = 0
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as opened:
                tensors += len(list(opened.keys()))
        except Exception as exc:  # safetensors raises its own error types for a bad file
            raise RegistrationError(
                f"{shard} does not open as safetensors ({exc}): it is truncated or corrupt; copy it again."
            ) from exc
    if tensors == 0:
        raise RegistrationError(f"The safetensors files in {folder} hold no tensor.")


def folder_checksum(folder: Path) -> str:
    """SHA-256 over the folder's files in sorted order of their relative paths: each path, its size, its bytes
    (the ``.prepared`` marker is left out: it says how the folder was made, not what a worker loads)."""
    files = sorted(
        (path.relative_to(folder).as_posix(), path)
        for path in folder.rglob("*")
        if path.is_file() and path.name != READY_MARKER
    )
    digest = hashlib.sha256()
    for relative, path in files:
        digest.update(f"{relative}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
