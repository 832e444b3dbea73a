"""``guard``: a guard model served as a deployment of this platform, asked with one engine step per text.

Each text goes into the guard prompt (``MODERATION_GUARD_PROMPT``; the built-in :data:`DEFAULT_PROMPT` is written in
Llama Guard's style, its categories named), rendered with the deployment's chat template and followed by
``MODERATION_GUARD_ANSWER_PREFIX``; the deployment's workers answer the most likely next tokens
(``deployments.guard.next_token_logprobs``: ``max_tokens=1``, no ``Run``). The score is
``p(unsafe) / (p(safe) + p(unsafe))`` over the label's spellings among those tokens (``safe``, `` Safe``...: any
case, any surrounding whitespace).

A label missing from the top :data:`TOP_LOGPROBS` is less likely than the least likely token listed: its
probability is taken as that bound (so the score is a bound too, never a made-up certainty); a text where neither
label is listed is :class:`ModerationUnavailable`: the prompt does not fit the model, and no score is honest.

One safe/unsafe question gives one score. It is reported for each category the prompt asks about
(``MODERATION_GUARD_CATEGORIES``) and for no other: a prompt that never mentions sexual content cannot say a text is
free of it. On CPU hosts the deployment is the packaged SmolLM2-135M prompted as a classifier: a stand-in that
exercises the path, whose scores say little about the text (docs/moderation.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.config import ModerationConfig
from core.errors import DomainError
from deployments.guard import next_token_logprobs, render_guard_prompt
from deployments.selection import Served, resolve_model
from generation.guard_contract import TokenLogprobs
from moderation.backends.base import CATEGORIES, ModerationResult, ModerationUnavailable

NAME = "guard"
OWN_THRESHOLD = 0.5
"""The guard's own decision: ``unsafe`` more likely than ``safe`` (what ``ModerationResult.flagged`` says)."""
TOP_LOGPROBS = 20
"""How many next tokens the worker lists (vLLM's ``max_logprobs`` here)."""
SAFE_LABEL = "safe"
UNSAFE_LABEL = "unsafe"
MODEL_TEMPLATE = "model"
"""``MODERATION_GUARD_PROMPT=model``: the model's own chat template is the guard prompt (Llama Guard 3, Qwen3Guard)."""

DEFAULT_PROMPT = """Task: Check if there is unsafe content in the 'User' message below according to our safety \
policy with the categories below.

<BEGIN UNSAFE CONTENT CATEGORIES>
S1: Violence or threats of violence.
S2: Harassment, insults or bullying.
S3: Hate against people for who they are.
S4: Self-harm or suicide.
S5: Sexual content.
S6: Crimes or illegal activities.
<END UNSAFE CONTENT CATEGORIES>

<BEGIN CONVERSATION>
User: {text}
<END CONVERSATION>

Answer with exactly one word: 'safe' if the message is harmless, 'unsafe' if it falls in a category above."""
"""The built-in prompt, in Llama Guard's layout; its six categories are ``MODERATION_GUARD_CATEGORIES``' default."""


def guard_user_message(text: str, template: str) -> str:
    """The user's turn the guard sees: ``text`` in ``template`` (``{text}``), or the text itself for ``model``."""
    if template.strip() == MODEL_TEMPLATE:
        return text
    return (template or DEFAULT_PROMPT).replace("{text}", text)


def label_probabilities(tokens: TokenLogprobs) -> tuple[float, float]:
    """``(p(safe), p(unsafe))`` among the listed next tokens: each label's spellings summed; a label not listed
    gets the least listed token's probability (an upper bound on its own); :class:`ModerationUnavailable` when
    neither is listed."""
    safe = [math.exp(lp) for token, lp in tokens if token.strip().lower() == SAFE_LABEL]
    unsafe = [math.exp(lp) for token, lp in tokens if token.strip().lower() == UNSAFE_LABEL]
    if not safe and not unsafe:
        listed = ", ".join(repr(token) for token, _ in tokens[:5])
        raise ModerationUnavailable(
            f"The guard model answered neither {SAFE_LABEL!r} nor {UNSAFE_LABEL!r} among its {len(tokens)} most "
            f"likely tokens (first: {listed}): its prompt does not fit the model (MODERATION_GUARD_PROMPT)."
        )
    floor = math.exp(min(lp for _, lp in tokens))
    return (sum(safe) if safe else floor), (sum(unsafe) if unsafe else floor)


def unsafe_score(tokens: TokenLogprobs) -> float:
    """``p(unsafe) / (p(safe) + p(unsafe))``: the guard's probability that the text is unsafe, 0..1."""
    p_safe, p_unsafe = label_probabilities(tokens)
    return p_unsafe / (p_safe + p_unsafe)


def result_for(score: float, categories: Sequence[str]) -> ModerationResult:
    """The one score on every category the prompt asks about."""
    return ModerationResult(
        flagged=score > OWN_THRESHOLD,
        categories={name: score > OWN_THRESHOLD for name in categories},
        category_scores={name: score for name in categories},
        backend=NAME,
    )


class GuardBackend:
    name = NAME

    def __init__(self, config: ModerationConfig) -> None:
        unknown = [name for name in config.guard_categories if name not in CATEGORIES]
        if unknown or not config.guard_categories:
            raise ModerationUnavailable(
                f"MODERATION_GUARD_CATEGORIES must name OpenAI moderation categories; unknown: {unknown or 'none set'}."
            )
        self.judges: tuple[str, ...] = tuple(config.guard_categories)
        self.model = config.guard_model
        self.template = config.guard_prompt
        self.answer_prefix = config.guard_answer_prefix
        self.timeout_s = config.guard_timeout_s

    def deployment(self) -> Served:
        """The guard's deployment (``MODERATION_GUARD_MODEL``, else the default one) with a ready worker."""
        try:
            return resolve_model(self.model or None)
        except DomainError as exc:
            raise ModerationUnavailable(f"The guard model is not available: {exc.message}") from exc

    def prompts(self, texts: list[str], deployment: Served) -> list[str]:
        try:
            return [
                render_guard_prompt(
                    deployment, user_message=guard_user_message(text, self.template), answer_prefix=self.answer_prefix
                )
                for text in texts
            ]
        except DomainError as exc:  # the tokenizer is not loaded yet
            raise ModerationUnavailable(f"The guard model cannot render its prompt: {exc.message}") from exc

    def classify(self, texts: list[str]) -> list[ModerationResult]:
        if not texts:
            return []
        deployment = self.deployment()
        try:
            answers = next_token_logprobs(
                self.prompts(texts, deployment), deployment, top_logprobs=TOP_LOGPROBS, timeout_s=self.timeout_s
            )
        except DomainError as exc:
            raise ModerationUnavailable(f"The guard model did not answer: {exc.message}") from exc
        return [result_for(unsafe_score(tokens), self.judges) for tokens in answers]
