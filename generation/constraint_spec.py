"""The constraints a request may choose by name: their registry and the check of their arguments.

A constraint is a state machine that the engine runs inside its decode loop (a vLLM V1 batch-level logits
processor, ``inference_workers.engine.constraints``): it advances with the request's output tokens and allows
only the tokens that keep the answer valid. A request names one with arguments,
``{"name": "catalogue", "args": {"items": [...]}}``; it travels as ``SamplingSpec.constraint`` and reaches vLLM
as ``SamplingParams.extra_args["constraint"]``.

:func:`check_constraint` is the one check: the API calls it before anything is written (a bad value is a 400
naming ``constraint``), and the engine's processor calls it again when vLLM admits the request
(``validate_params``), so a request that bypassed the API cannot crash a step. It imports no vLLM or torch:
the web tier calls it.

``catalogue``: the answer is exactly one of ``items``, then end of sequence. The limits bound what one
request can make the engine build and scan every step: at most :data:`MAX_CATALOGUE_ITEMS` items, each a
non-empty string of at most :data:`MAX_CATALOGUE_ITEM_CHARS` characters. Duplicates are dropped (first one
kept, order kept). The items are matched as the model writes them at the start of its answer (tokenized
without a leading space); a ``max_tokens`` too small for the longest item ends the answer early
(``finish_reason: length``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generation.sampling import SamplingError

PARAM = "constraint"
MAX_CATALOGUE_ITEMS = 1024
"""A few pages of a product catalogue; the first step's mask holds at most this many allowed tokens per row."""
MAX_CATALOGUE_ITEM_CHARS = 256
"""A product name or an answer label, not a paragraph."""


def _fail(message: str) -> SamplingError:
    return SamplingError(message, param=PARAM)


def _check_catalogue(args: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(args) - {"items"})
    if unknown:
        raise _fail(f"'constraint' catalogue takes only 'items' in its args; got {unknown}.")
    items = args.get("items")
    if not isinstance(items, list) or not items:
        raise _fail("'constraint' catalogue needs args.items: a non-empty list of strings.")
    if len(items) > MAX_CATALOGUE_ITEMS:
        raise _fail(f"'constraint' catalogue takes at most {MAX_CATALOGUE_ITEMS} items; got {len(items)}.")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise _fail(f"'constraint' catalogue args.items[{i}] must be a non-empty string; got {item!r}.")
        if len(item) > MAX_CATALOGUE_ITEM_CHARS:
            raise _fail(
                f"'constraint' catalogue args.items[{i}] is {len(item)} characters long; "
                f"at most {MAX_CATALOGUE_ITEM_CHARS} are allowed."
            )
    return {"items": list(dict.fromkeys(items))}


CONSTRAINTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "catalogue": _check_catalogue,
}
"""Constraint name -> the check of its ``args`` (returns them normalized). The engine registers one state
machine builder per name here (``inference_workers.engine.constraints.registry.BUILDERS``)."""


def check_constraint(value: object) -> dict[str, Any]:
    """``value`` as ``{"name", "args"}`` with its args normalized; :class:`SamplingError` saying what to fix."""
    if not isinstance(value, dict):
        raise _fail(f'\'constraint\' must be an object {{"name": ..., "args": {{...}}}}; got {type(value).__name__}.')
    unknown = sorted(set(value) - {"name", "args"})
    if unknown:
        raise _fail(f"'constraint' takes only 'name' and 'args'; got {unknown}.")
    name = value.get("name")
    if not isinstance(name, str) or name not in CONSTRAINTS:
        raise _fail(f"'constraint' name must be one of {sorted(CONSTRAINTS)}; got {name!r}.")
    args = value.get("args", {})
    if not isinstance(args, dict):
        raise _fail(f"'constraint' args must be an object; got {type(args).__name__}.")
    return {"name": name, "args": CONSTRAINTS[name](args)}
