"""An embedding model folder read as sentence-transformers defines it, run with ``transformers`` + torch (CPU).

A sentence-transformers folder is a Hugging Face encoder (``config.json``, tokenizer, safetensors) plus how its token
states become one vector: ``1_Pooling/config.json`` (mean, CLS, max or mean-sqrt-len pooling) and, when
``modules.json`` lists ``Normalize``, an L2 normalization. ``sentence_bert_config.json``'s ``max_seq_length`` is
the longest input the model was trained on (256 for all-MiniLM-L6-v2; BERT's positions would reach 512).

:class:`EmbeddingModel` takes token ids (the web tokenizes: it counts tokens for admission and limits anyway),
pads a batch, runs one forward pass and pools; it is what the embedding worker serves and what registration's load
check runs. torch and transformers are imported on use: only the worker and registration need them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
PROBE_SENTENCE = "The quick brown fox jumps over the lazy dog."
"""What registration's load check embeds (it must come back as a finite vector of the model's dimensions)."""


class EmbeddingModelError(ValueError):
    """The folder is not an embedding model this runtime can serve; the message says what is missing."""


@dataclass(frozen=True)
class EmbeddingSpec:
    """What serving needs to know of an embedding model without loading its weights."""

    dimensions: int
    max_tokens: int
    """Longest input in tokens, special tokens included."""
    pooling: str
    """One of :data:`POOLING_MODES`."""
    normalize: bool


def read_spec(folder: Path) -> EmbeddingSpec:
    """The model's dimensions, length limit, pooling and normalization, from its files alone."""
    config = _json(folder / "config.json")
    if config is None:
        raise EmbeddingModelError(f"{folder} has no config.json: a Hugging Face model folder needs one.")
    hidden = int(config.get("hidden_size") or 0)
    pooling_config = _json(folder / "1_Pooling" / "config.json") or {}
    dimensions = int(pooling_config.get("word_embedding_dimension") or hidden)
    if dimensions <= 0:
        raise EmbeddingModelError(f"{folder}/config.json gives no hidden_size: the vector size is unknown.")
    modes = [mode for mode in POOLING_MODES if pooling_config.get(f"pooling_mode_{mode}")]
    pooling = modes[0] if modes else "mean_tokens"
    if len(modes) > 1:
        raise EmbeddingModelError(f"{folder}/1_Pooling/config.json combines poolings ({modes}): not supported.")
    modules = _json(folder / "modules.json") or []
    normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
    positions = int(config.get("max_position_embeddings") or 512)
    st_config = _json(folder / "sentence_bert_config.json") or {}
    max_tokens = min(int(st_config.get("max_seq_length") or positions), positions)
    return EmbeddingSpec(dimensions=dimensions, max_tokens=max_tokens, pooling=pooling, normalize=normalize)


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EmbeddingModelError(f"{path} is not valid JSON ({exc}): fix or replace it.") from exc


class EmbeddingModel:
    """One loaded encoder. :meth:`embed` is thread-safe (one forward pass at a time: the worker batches in front
    of it, so concurrent passes would only fight over the same cores)."""

    def __init__(self, folder: Path, *, threads: int = 0) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if threads > 0:
            torch.set_num_threads(threads)
        self.folder = folder
        self.spec = read_spec(folder)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
        self.model.eval()
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        self._lock = threading.Lock()

    def tokenize(self, text: str) -> list[int]:
        """The ids the model sees for ``text`` (``[CLS] ... [SEP]``), not truncated."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=True)
        return ids

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        """One vector per token-id list (each at most ``spec.max_tokens`` long), in one padded forward pass."""
        import torch

        if not batch:
            return []
        longest = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            mask[row, : len(tokens)] = 1
        with self._lock, torch.inference_mode():
            states = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        vectors = pool(states, mask, self.spec.pooling)
        if self.spec.normalize:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        result: list[list[float]] = vectors.tolist()
        return result


def pool(states: Any, mask: Any, mode: str) -> Any:
    """sentence-transformers' pooling of token states ``[batch, tokens, dim]`` under ``mask`` ``[batch, tokens]``."""
    import torch

    weights = mask.unsqueeze(-1).to(states.dtype)
    if mode == "cls_token":
        return states[:, 0]
    if mode == "max_tokens":
        return states.masked_fill(weights == 0, torch.finfo(states.dtype).min).max(dim=1).values
    summed = (states * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return summed / (counts.sqrt() if mode == "mean_sqrt_len_tokens" else counts)


def probe(folder: Path) -> EmbeddingSpec:
    """The load check of registration: the model loads and embeds :data:`PROBE_SENTENCE` into a finite vector of
    its dimensions (unit length when it normalizes); :class:`EmbeddingModelError` otherwise."""
    import math

    try:
        model = EmbeddingModel(folder)
        [vector] = model.embed([model.tokenize(PROBE_SENTENCE)[: model.spec.max_tokens]])
    except EmbeddingModelError:
        raise
    except Exception as exc:  # transformers and torch raise many kinds; each means it does not serve
        raise EmbeddingModelError(f"the model does not embed ({exc.__class__.__name__}: {exc})") from exc
    if len(vector) != model.spec.dimensions or not all(math.isfinite(x) for x in vector):
        raise EmbeddingModelError(
            f"the probe sentence came back as {len(vector)} values (expected {model.spec.dimensions} finite ones)"
        )
    norm = math.sqrt(sum(x * x for x in vector))
    if model.spec.normalize and abs(norm - 1.0) > 1e-3:
        raise EmbeddingModelError(f"the probe vector has norm {norm:.4f}; the model normalizes, so it should be 1")
    return model.spec
