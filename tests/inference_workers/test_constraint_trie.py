"""The catalogue state machine on its token trie, and the registry that builds it (pure Python, no engine)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from generation.constraint_spec import CONSTRAINTS
from generation.sampling import SamplingError
from inference_workers.engine.constraints.registry import BUILDERS, StateFactories
from inference_workers.engine.constraints.trie import CatalogueState, TokenTrie

EOS = 2


def walk(state: CatalogueState, tokens: Sequence[int]) -> tuple[int, ...]:
    for token in tokens:
        assert token in state.allowed_ids(), f"{token} was not allowed"
        state.advance(token)
    return state.allowed_ids()


def test_only_the_items_prefixes_then_eos_are_allowed() -> None:
    trie = TokenTrie([[10, 11], [10, 12, 13], [20]], [EOS])
    state = CatalogueState(trie)
    assert sorted(state.allowed_ids()) == [10, 20]
    assert sorted(walk(state, [10])) == [11, 12]
    assert walk(state, [12]) == (13,)
    assert walk(state, [13]) == (EOS,)
    state.advance(EOS)
    assert state.finished
    assert state.allowed_ids() == (EOS,)


def test_an_item_that_prefixes_another_may_end_or_go_on() -> None:
    trie = TokenTrie([[5], [5, 6]], [EOS, 99])
    state = CatalogueState(trie)
    assert sorted(walk(state, [5])) == [EOS, 6, 99]
    assert walk(state, [6]) == (EOS, 99)


def test_a_token_off_the_trie_leaves_only_the_end() -> None:
    state = CatalogueState(TokenTrie([[1, 2]], [EOS]))
    state.advance(7)
    assert state.finished
    assert state.allowed_ids() == (EOS,)


def test_shared_prefixes_share_nodes() -> None:
    assert len(TokenTrie([[1, 2, 3], [1, 2, 4], [1, 5]], [EOS])) == 6  # root, 1, 2, 3, 4, 5


def test_a_trie_needs_an_end_token_and_non_empty_items() -> None:
    with pytest.raises(ValueError, match="end-of-sequence"):
        TokenTrie([[1]], [])
    with pytest.raises(ValueError, match="no tokens"):
        TokenTrie([[1], []], [EOS])


def test_every_constraint_name_has_an_engine_builder() -> None:
    assert set(BUILDERS) == set(CONSTRAINTS)


def test_factories_tokenize_items_without_a_leading_space_and_share_the_trie() -> None:
    calls: list[str] = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return [100 + ord(c) for c in text]

    factories = StateFactories(encode)
    constraint = {"name": "catalogue", "args": {"items": ["ab", "ac", "ab"]}}
    first = factories.new_state(constraint, (EOS,))
    second = factories.new_state(constraint, (EOS,))
    assert calls == ["ab", "ac"]  # duplicates dropped; the second request reuses the trie
    assert isinstance(first, CatalogueState) and isinstance(second, CatalogueState)
    assert first.trie is second.trie and first is not second
    assert walk(first, [100 + ord("a")]) == (100 + ord("b"), 100 + ord("c"))
    assert second.allowed_ids() == (100 + ord("a"),)  # states are per request


def test_factories_check_the_constraint_again() -> None:
    with pytest.raises(SamplingError):
        StateFactories(lambda text: [1]).new_state({"name": "catalogue", "args": {"items": []}}, (EOS,))
