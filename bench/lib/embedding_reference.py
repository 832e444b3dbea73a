"""all-MiniLM-L6-v2 in this process, the reference implementation (transformers, mean pooling over the attention
mask, L2 normalization: the model card's recipe), for the benches that judge embeddings without a worker."""

from __future__ import annotations


def embed_reference(texts: list[str]) -> dict[str, list[float]]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from deployments.defaults import default_embedding_fields

    folder = str(default_embedding_fields()["local_path"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder)
    torch.set_num_threads(1)
    out: dict[str, list[float]] = {}
    for start in range(0, len(texts), 32):
        chunk = texts[start : start + 32]
        encoded = tokenizer(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            states = model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        vectors = torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()
        out.update(zip(chunk, vectors, strict=True))
    return out
