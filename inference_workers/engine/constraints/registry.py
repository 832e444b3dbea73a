"""Constraint name -> how the engine builds its state machine from the checked args (pure: no torch, no vLLM).

The names and their argument checks live in ``generation.constraint_spec`` (the web tier checks requests with them);
this module holds the engine half, one builder per name, and a test keeps the two sets equal.

A builder gets the args as :func:`generation.constraint_spec.check_constraint` normalized them, ``encode`` (text -> the
token ids the model would write for it at the start of its answer) and the request's end-of-sequence ids, and
returns a factory of fresh states. What it builds from the args (a trie) is shared by every request with the same
args, through :func:`state_factory`'s cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from generation.constraint_spec import check_constraint
from inference_workers.engine.constraints.trie import CatalogueState, ConstraintState, TokenTrie

Encode = Callable[[str], Sequence[int]]
StateFactory = Callable[[], ConstraintState]
Builder = Callable[[dict[str, Any], Encode, tuple[int, ...]], StateFactory]

TRIE_CACHE_SIZE = 128
"""Distinct (constraint, args) pairs whose tries are kept: a product reuses a few catalogues many times."""


def catalogue_trie(items: Sequence[str], encode: Encode, end_ids: tuple[int, ...]) -> TokenTrie:
    """The trie of ``items`` as the model writes them: each item's canonical tokens, without a leading space.

    After a chat template's assistant prefix (``<|im_start|>assistant\\n`` for SmolLM2) the model writes the
    first word without a leading space (``Paris`` is one token there, ``" Paris"`` another).
    """
    return TokenTrie((encode(item) for item in items), end_ids)


def _build_catalogue(args: dict[str, Any], encode: Encode, end_ids: tuple[int, ...]) -> StateFactory:
    trie = catalogue_trie(args["items"], encode, end_ids)
    return lambda: CatalogueState(trie)


BUILDERS: dict[str, Builder] = {
    "catalogue": _build_catalogue,
}


def _key(args: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(args.items()))


class StateFactories:
    """Builds (and caches) the state factory of a request's ``extra_args["constraint"]`` for one tokenizer."""

    def __init__(self, encode: Encode) -> None:
        self._encode = encode
        self._cached = lru_cache(maxsize=TRIE_CACHE_SIZE)(self._build)

    def _build(self, name: str, key: tuple[Any, ...], end_ids: tuple[int, ...]) -> StateFactory:
        args = {k: list(v) if isinstance(v, tuple) else v for k, v in key}
        return BUILDERS[name](args, self._encode, end_ids)

    def new_state(self, constraint: object, end_ids: tuple[int, ...]) -> ConstraintState:
        """A fresh state for ``constraint`` (checked again here: vLLM's frontend has checked it already)."""
        checked = check_constraint(constraint)
        return self._cached(checked["name"], _key(checked["args"]), end_ids)()
