"""Reads for the browser UI."""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import Tier, User


@dataclass(frozen=True)
class AccountSummary:
    user: User
    tier: Tier
    remaining_tokens: int | None
    """Tokens left in the user's bucket now; ``None`` where admission keeps no bucket for the user yet."""


def remaining_budget(*, user: User) -> int | None:
    """The user's remaining token budget as the admission module sees it, if it exposes one."""
    return None


def account_summary(*, user: User) -> AccountSummary:
    return AccountSummary(user=user, tier=user.tier, remaining_tokens=remaining_budget(user=user))
