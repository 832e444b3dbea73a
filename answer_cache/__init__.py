"""The semantic answer cache: an answer is served again for a later prompt that means the same thing.

A prompt's key is an exact-match **partition** (the deployment ``name@version``, digests of the system prompt and of
the history before the prompt, the sampling parameters, the structured-output constraint, the tools: ``keys``) plus
the prompt's **embedding**, searched in that partition with a vector index (``index``: usearch). Entries live in
Postgres (``models.CacheEntry``), each web process keeps an index that follows them, and every hit is checked
against its row. By default an entry is seen only by its own user; a tier's admin opt-in (``models.CachePolicy``)
shares prompts without history or per-user context among that tier's users. ``services`` holds what the run's
passes call: ``cache_lookup``, ``cache_store``, the purge. docs/answer-cache.md has the design and the figures.

Layers: imports ``core``, ``accounts``, ``deployments`` and ``generation``; nothing above (``runs`` calls it).
"""
