"""Token tries and the catalogue state machine: pure Python, no torch, so they are tested in milliseconds.

A :class:`TokenTrie` holds the token sequences of a catalogue's items, sharing common prefixes; every node keeps
the tuple of token ids allowed after it (its children, plus the end-of-sequence ids where an item ends), made
once at build time, so a decode step reads one tuple per request and allocates nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

ROOT = 0


class ConstraintState(Protocol):
    """One request's constraint: advances with each output token, says which tokens may come next."""

    def advance(self, token_id: int) -> None: ...

    def allowed_ids(self) -> tuple[int, ...]: ...


class TokenTrie:
    """The token sequences of a set of items. Node 0 is the root; ``end_ids`` end an answer where an item ends."""

    def __init__(self, sequences: Iterable[Sequence[int]], end_ids: Iterable[int]) -> None:
        self.end_ids = tuple(sorted(set(end_ids)))
        if not self.end_ids:
            raise ValueError("a token trie needs at least one end-of-sequence token id")
        self.children: list[dict[int, int]] = [{}]
        terminal = [False]
        for sequence in sequences:
            if not sequence:
                raise ValueError("an item tokenized to no tokens")
            node = ROOT
            for token in sequence:
                nxt = self.children[node].get(token)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][token] = nxt
                    self.children.append({})
                    terminal.append(False)
                node = nxt
            terminal[node] = True
        self.terminal = terminal
        self.allowed: list[tuple[int, ...]] = [
            tuple(kids) + (self.end_ids if term else ()) for kids, term in zip(self.children, terminal, strict=True)
        ]
        """Node -> the token ids allowed after it, in a fixed order."""

    def __len__(self) -> int:
        return len(self.children)


class CatalogueState:
    """Walks a :class:`TokenTrie`: the answer is exactly one item, then an end token.

    Once the answer has ended (an end token), or if a token off the trie ever arrives (no mask of ours allows
    one; only a processor applied after ours could), only end tokens are allowed: an ``ignore_eos`` request
    keeps emitting them until ``max_tokens``, and nothing past a finished item is ever allowed.
    """

    __slots__ = ("node", "trie")

    def __init__(self, trie: TokenTrie) -> None:
        self.trie = trie
        self.node: int | None = ROOT
        """The trie node reached; None once the answer is over."""

    def advance(self, token_id: int) -> None:
        if self.node is None:
            return
        self.node = self.trie.children[self.node].get(token_id)

    def allowed_ids(self) -> tuple[int, ...]:
        if self.node is None:
            return self.trie.end_ids
        return self.trie.allowed[self.node]

    @property
    def finished(self) -> bool:
        return self.node is None
