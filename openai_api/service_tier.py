"""OpenAI's ``service_tier`` onto this server's tiers (``accounts.Tier``), never above the user's own.

- left out, ``auto``, ``default``, ``scale``, ``priority``: the user's own tier (nobody is served above it;
  ``priority`` and ``scale`` are OpenAI's paid-for capacity, which here is the tier itself);
- ``flex`` (OpenAI: cheaper, slower): the next tier below the user's (by scheduling priority), if there is one;
- a tier's name: that tier when it is the user's or below it, else the user's own.

The run is queued and scheduled as a run of the tier chosen (its queue, its engine priority, its prompt budget);
admission and the caps (token bucket, concurrency, ``max_tokens``) stay the user's. The answer's ``service_tier``
says, in OpenAI's words (clients check them against OpenAI's list), how it was served: ``default`` on the user's own
tier, ``flex`` on a lower one (:func:`answered_service_tier`); the run's JSON names the tier itself.
"""

from __future__ import annotations

from accounts.models import Tier, User
from openai_api.errors import OpenAIRequestError
from openai_api.options import OPENAI_SERVICE_TIERS
from runs.models import Run


def service_tier_for(*, user: User, requested: str | None) -> Tier:
    """The tier the call's runs are served on; an unknown name is a 400 naming the choices."""
    own: Tier = user.tier
    if requested is None or (requested in OPENAI_SERVICE_TIERS and requested != "flex"):
        return own
    if requested == "flex":
        lower = Tier.objects.filter(priority__gt=own.priority).order_by("priority", "name").first()
        return lower or own
    named = Tier.objects.filter(name=requested).first()
    if named is None:
        names = ", ".join([*OPENAI_SERVICE_TIERS, *Tier.objects.values_list("name", flat=True)])
        raise OpenAIRequestError(
            f"'service_tier' must be one of {names}; got '{requested}'.", param="service_tier", code="invalid_value"
        )
    return named if named.priority >= own.priority else own


def answered_service_tier(run: Run) -> str:
    """The answer's ``service_tier``: ``default`` when the run was served on its user's own tier, ``flex`` below it
    (``run.user`` is the caller, already loaded by the view: no query)."""
    return "default" if run.tier_id == run.user.tier_id else "flex"
