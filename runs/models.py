"""A Run is one attempt to produce an assistant message (OpenAI's run lifecycle is the reference)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RunStatus(models.TextChoices):
    """``queued → streaming → done | cancelled | failed``, with ``cancelling`` while an abort is in flight.

    The strings are part of the API (and mirrored in ``web/static/web/constants.js``). A status read from the
    database is a plain ``str``: wrap it (``RunStatus(value).is_terminal``) before asking.
    """

    QUEUED = "queued"
    STREAMING = "streaming"
    CANCELLING = "cancelling"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        """The run has ended: its message (if any), counts and refund are written; nothing changes it again."""
        return self in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        """Not ended yet: at most one such run per chat (``one_active_run_per_chat``)."""
        return not self.is_terminal


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.STREAMING, RunStatus.CANCELLING)
TERMINAL_STATUSES = (RunStatus.DONE, RunStatus.CANCELLED, RunStatus.FAILED)


class FinishReason(models.TextChoices):
    """Why a run ended, as the API reports it (an engine ``abort`` is ``cancelled`` here)."""

    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    ERROR = "error"
    CONTENT_FILTER = "content_filter"
    """The output moderation pass stopped it: the answer is retracted (``runs.passes``)."""


class PromptMode(models.TextChoices):
    """How the worker turns the run's chat into the engine's prompt."""

    CHAT = "chat"
    """The chat's messages through the model's chat template (every chat, ``/v1/chat/completions``)."""
    RAW = "raw"
    """The user message's text exactly as given (``/v1/completions``): no template, no history."""
    CONTINUE = "continue"
    """The chat's messages through the chat template with the last one (an assistant's, from
    ``/v1/chat/completions``) left open: the answer goes on from its text (vLLM's ``continue_final_message``)."""


class Recovery(models.TextChoices):
    """How a run went on after the worker generating it drained past its deadline or died."""

    NONE = "", "none"
    CONTINUED = "continued"
    """Another worker of the same deployment went on from the tokens already streamed (no ``reset``)."""
    RESTARTED = "restarted"
    """Continuing was impossible (a constrained or tool-calling run, or no streamed text to go on from): it
    started over after a ``reset`` event."""


class Revision(models.TextChoices):
    """What a run does to the chat's last answer (``Run.replaces``)."""

    NONE = "", "none"
    REGENERATE = "regenerate"
    """Answers the same prompt again: its answer becomes the current version, the replaced one an earlier one."""
    CONTINUE = "continue"
    """Goes on from a stopped answer (cancelled, or cut at ``length``): its answer is that text and what it adds."""


class Run(models.Model):
    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="runs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    tier = models.ForeignKey("accounts.Tier", on_delete=models.PROTECT, related_name="runs")
    user_message = models.ForeignKey(
        "chats.Message",
        on_delete=models.CASCADE,
        related_name="runs",
        help_text="The prompt it answers (several runs when the answer was regenerated or continued).",
    )
    assistant_message = models.OneToOneField(
        "chats.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="answered_by"
    )
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    finish_reason = models.CharField(max_length=16, choices=FinishReason.choices, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="", help_text="The served model's name.")
    deployment = models.ForeignKey(
        "deployments.ModelDeployment",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        help_text="The (model, version) this run was routed to, and that served it.",
    )
    worker = models.CharField(max_length=200, blank=True, default="")
    priority = models.PositiveSmallIntegerField(default=0)
    max_tokens = models.PositiveIntegerField()
    temperature = models.FloatField(default=0.7)
    top_p = models.FloatField(default=1.0)
    sampling = models.JSONField(
        default=dict,
        blank=True,
        help_text="The other sampling parameters asked for (generation.sampling.SamplingSpec.to_json: only those that "
        "differ from their defaults): stop, seed, penalties, logprobs, structured outputs, constraint...",
    )
    tools = models.JSONField(
        default=list, blank=True, help_text="OpenAI tool definitions the prompt is rendered with (chat template)."
    )
    prompt_mode = models.CharField(max_length=8, choices=PromptMode.choices, default=PromptMode.CHAT)
    end_user = models.CharField(
        max_length=256, blank=True, default="", help_text="The caller's own user id (OpenAI's 'user' parameter)."
    )
    metadata = models.JSONField(
        default=dict,
        blank=True,
        help_text="The caller's own key/value tags (OpenAI's 'metadata' parameter), kept as sent.",
    )
    prompt_cache_key = models.CharField(
        max_length=256,
        blank=True,
        default="",
        help_text="OpenAI's 'prompt_cache_key': the caller's runs with the same key prefer the worker that served the "
        "last of them (its prefix cache).",
    )
    store = models.BooleanField(
        default=True,
        help_text="OpenAI's 'store': whether the answer stays retrievable (and usable as previous_response_id).",
    )
    revision = models.CharField(max_length=16, choices=Revision.choices, blank=True, default=Revision.NONE)
    replaces = models.ForeignKey(
        "chats.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The answer this run regenerates or continues; superseded once this run stores its own.",
    )
    passes = models.JSONField(
        default=list,
        blank=True,
        help_text="What each pass around the run decided, in order (runs.passes): routing, moderation, the cache; "
        "each with its decision, its cost in ms and its scores.",
    )
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    reserved_tokens = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    handoffs = models.PositiveSmallIntegerField(
        default=0,
        help_text="Attempts that handed the run back to the queue (a drain, a preemption): they ended cleanly and "
        "do not count against WORKER_MAX_ATTEMPTS.",
    )
    recovery = models.CharField(
        max_length=16,
        choices=Recovery.choices,
        blank=True,
        default=Recovery.NONE,
        help_text="How the latest attempt went on from an earlier one: continued from its streamed tokens, or "
        "restarted from scratch (empty: it never had to).",
    )
    resumed_tokens = models.PositiveIntegerField(
        default=0, help_text="Output tokens an earlier attempt had streamed that the latest one continued from."
    )
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["user", "status"], name="run_user_status"),
            models.Index(fields=["status", "tier"], name="run_status_tier"),
            models.Index(fields=["chat", "-created_at"], name="run_chat_time"),
            models.Index(fields=["deployment", "-created_at"], name="run_deployment_time"),
            models.Index(
                fields=["user", "prompt_cache_key", "-id"],
                name="run_user_cache_key",
                condition=~models.Q(prompt_cache_key=""),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["chat"],
                condition=models.Q(status__in=list(ACTIVE_STATUSES)),
                name="one_active_run_per_chat",
            )
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return RunStatus(self.status).is_terminal

    @property
    def is_active(self) -> bool:
        return RunStatus(self.status).is_active
