"""Cross-chat memory (docs/memory.md): what a user said in one chat, recalled in another.

Opt-in per user (``accounts.User.memory_enabled``), switchable per tier by the admin (``MemoryPolicy``). While on,
each prompt a user posts in a chat of theirs is kept as a :class:`~memory.models.Memory` (its text and its
embedding), and a new prompt recalls the top-k memories from the user's *other* chats that are close enough in
meaning; they go into the prompt after its stable prefix (``chats.context``), so vLLM's prefix cache keeps hitting.
Users list, search, add and delete their memories (``/api/memories``, the UI's "Memory" dialog); a deleted memory is
never recalled again.

A memory is its user's alone: every search is in the user's own partition of the index, and every candidate's row
is read and must be the user's before it is recalled.

Layer: above ``chats`` and ``deployments`` (a memory names the chat and message it came from; embeddings come from an
embedding deployment), below ``runs`` (the run's pass before the queue calls it).
"""
