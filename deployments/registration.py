"""Registering a deployment: validate it, materialize its weights on local disk, verify them, checksum them.

``register_deployment`` refuses bad input (:class:`RegistrationError`, a 400 that says what to fix) before it writes
anything. It then writes the row (``registered``) and :func:`materialize_deployment` copies the weights into the
model cache (``ENGINE.model_cache_dir / "name@version"``, through ``deployments.model_files.write_staged``: a
staging sibling renamed into place, so a worker never sees half a copy), verifies the copy (config, tokenizer, chat
template, weights that open) and records its SHA-256. A deployment only becomes ``ready`` (selectable) through that
verification; any failure leaves it ``failed`` with the reason, removes the partial copy and touches no other
deployment. "Materialize" means that step only; preparing the packaged model from its GGUF is ``model_files``'.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.utils import OperationalError, ProgrammingError
from django.utils import timezone

from core.errors import DomainError
from deployments.model_files import (
    READY_MARKER,
    ModelPreparationError,
    is_prepared,
    prepare_default_model,
    prepare_embedding_model,
    write_staged,
)
from deployments.model_store import (
    S3_SCHEME,
    ModelStoreError,
    download_folder,
    list_folder,
    parse_store_url,
    store_client,
)
from deployments.models import (
    DeploymentKind,
    DeploymentStatus,
    ModelDeployment,
    SourceKind,
    deployment_key,
    name_validator,
)
from deployments.selection import AUTO_MODEL, forget_cached
from deployments.verification import RegistrationError, folder_checksum, verify_model_folder

__all__ = ["RegistrationError", "folder_checksum", "register_deployment", "verify_model_folder"]

logger = logging.getLogger(__name__)

RESERVED_ENGINE_ARGS = frozenset({"model", "served_model_name", "tokenizer"})
"""Set by the worker from the deployment itself (its local copy and its name), never by ``engine_args``."""
MATERIALIZABLE = (DeploymentStatus.REGISTERED, DeploymentStatus.FAILED)


# --- validation (before anything is written) -------------------------------------------------------------------


def validate_registration(
    *, name: str, version: str, source_kind: str, source_path: str, engine_args: Any, traffic_weight: int
) -> tuple[str, dict[str, Any]]:
    """The source path (absolute) and engine arguments to store; :class:`RegistrationError` when anything is off."""
    _validate_name("name", name)
    _validate_name("version", version)
    if name.lower() == AUTO_MODEL:
        raise RegistrationError(f"name '{name}' is reserved: 'model: \"{AUTO_MODEL}\"' asks the router to choose.")
    if source_kind not in SourceKind.values:
        raise RegistrationError(f"source_kind '{source_kind}' is not one of: {', '.join(SourceKind.values)}.")
    if isinstance(traffic_weight, bool) or not isinstance(traffic_weight, int) or not 0 <= traffic_weight <= 100:
        raise RegistrationError(f"traffic_weight must be a whole number from 0 to 100, not {traffic_weight!r}.")
    source = validate_source(source_kind, source_path)
    args = validate_engine_args(engine_args)
    existing = ModelDeployment.objects.filter(name=name, version=version).first()
    if existing is not None:
        raise RegistrationError(_already_registered(existing))
    return source, args


MAX_COST = Decimal("99999999.9999")
"""The largest cost the column holds (12 digits, 4 after the point)."""


def validate_cost(field: str, value: Decimal | int | str) -> Decimal:
    """``value`` as a cost per million tokens (0 or more, at most 4 decimals); :class:`RegistrationError` if not."""
    try:
        cost = Decimal(str(value))
    except (ArithmeticError, ValueError):
        raise RegistrationError(f"{field} must be a number such as 0.15, not {str(value)[:50]!r}.") from None
    if not cost.is_finite() or cost < 0 or cost > MAX_COST or cost != cost.quantize(Decimal("0.0001")):
        raise RegistrationError(f"{field} must be from 0 to {MAX_COST} with at most 4 decimals, not {value!r}.")
    return cost


def _validate_name(field: str, value: str) -> None:
    try:
        name_validator(value)
    except ValidationError as exc:
        raise RegistrationError(f"{field} '{value[:200]}' is not valid: {' '.join(exc.messages)}") from exc


def validate_source(source_kind: str, source_path: str) -> str:
    """The source folder as stored (absolute; empty for packaged; ``s3://bucket/prefix/`` for s3); refused when it
    is not an existing folder (for s3: not a well-formed URL; the store itself is read at materialization)."""
    if source_kind == SourceKind.PACKAGED:
        if source_path:
            raise RegistrationError("A packaged deployment takes no source path: leave it empty, or use hf_folder.")
        return ""
    if source_kind == SourceKind.S3:
        try:
            return parse_store_url(source_path).url
        except ModelStoreError as exc:
            raise RegistrationError(f"source_path {exc.message}") from exc
    if not source_path:
        raise RegistrationError(f"A {source_kind} deployment needs source_path: the folder that holds config.json.")
    if source_path.startswith(S3_SCHEME):
        raise RegistrationError(f"source_path {source_path[:200]!r} is in a model store: use source_kind s3.")
    folder = Path(source_path).expanduser().resolve()
    if not folder.is_dir():
        raise RegistrationError(
            f"The source folder {folder} does not exist (or is not a folder): give a Hugging Face model folder "
            "(config.json, tokenizer files, *.safetensors)."
        )
    return str(folder)


def _already_registered(row: ModelDeployment) -> str:
    reason = f": {row.status_reason}" if row.status_reason else ""
    return (
        f"{row.key} is already registered (status {row.status}{reason}). Register another version, or fix its "
        "source and run the admin action 'Materialize and verify' on it."
    )


def validate_engine_args(engine_args: Any) -> dict[str, Any]:
    """``engine_args`` as stored: a JSON object whose keys are vLLM ``AsyncEngineArgs`` fields (not the reserved)."""
    if engine_args is None:
        return {}
    if not isinstance(engine_args, dict):
        raise RegistrationError(
            'engine_args must be a JSON object of vLLM engine arguments, e.g. {"max_model_len": 2048}.'
        )
    if not engine_args:
        return {}
    keys = [str(key) for key in engine_args]
    reserved = sorted(set(keys) & RESERVED_ENGINE_ARGS)
    if reserved:
        raise RegistrationError(
            f"engine_args may not set {', '.join(reserved)}: the worker sets them from the deployment "
            "(its local copy and its name)."
        )
    try:
        json.dumps(engine_args)
    except (TypeError, ValueError) as exc:
        raise RegistrationError(
            f"engine_args must hold JSON values only (numbers, strings, lists, objects): {exc}."
        ) from exc
    known = engine_arg_names()
    unknown = [key for key in keys if key not in known]
    if unknown:
        hints = [
            f"{key} (did you mean {', '.join(close)}?)" if (close := _close(key, known)) else key for key in unknown
        ]
        raise RegistrationError(
            f"Unknown vLLM engine argument(s): {'; '.join(hints)}. Use the field names of vLLM's AsyncEngineArgs, "
            "e.g. max_model_len, dtype, max_num_seqs, tensor_parallel_size, quantization."
        )
    return dict(engine_args)


def _close(key: str, known: frozenset[str]) -> list[str]:
    return difflib.get_close_matches(key, sorted(known), n=2)


@functools.cache
def engine_arg_names() -> frozenset[str]:
    """The fields of vLLM's ``AsyncEngineArgs`` (imported on use: vLLM takes seconds to import, and only
    registrations that pass ``engine_args`` need it)."""
    import dataclasses

    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
    except ImportError as exc:
        raise RegistrationError(
            f"vLLM cannot be imported here ({exc}), so engine_args cannot be checked: register from a host with "
            "vLLM installed, or without engine_args."
        ) from exc
    return frozenset(field.name for field in dataclasses.fields(AsyncEngineArgs))


# --- registration and materialization ----------------------------------------------------------------------------


def register_deployment(
    *,
    name: str,
    version: str,
    source_kind: str,
    source_path: str = "",
    engine_args: dict[str, Any] | None = None,
    traffic_weight: int = 0,
    make_default: bool = False,
    kind: str = DeploymentKind.GENERATE,
    cost_per_million_input_tokens: Decimal | int | str = 0,
    cost_per_million_output_tokens: Decimal | int | str = 0,
) -> ModelDeployment:
    """Validates, writes the row (``registered``), materializes and verifies it; ``ready`` on return.

    Raises :class:`RegistrationError`: before writing anything for bad input; after marking the row ``failed``
    (with the reason) when its weights do not materialize or verify. ``make_default`` moves ``is_default`` to it
    once it is ready (never on failure; never for an ``embed`` deployment: the default serves chats). The costs per
    million tokens (input, output) are what the router's cost figures use; negative or non-numbers are refused.
    """
    if kind not in DeploymentKind.values:
        raise RegistrationError(f"kind '{kind}' is not one of: {', '.join(DeploymentKind.values)}.")
    if make_default and kind != DeploymentKind.GENERATE:
        raise RegistrationError("Only a text-generation deployment can be the default (new chats use it).")
    other_kind = ModelDeployment.objects.filter(name=name).exclude(kind=kind).values_list("kind", flat=True).first()
    if other_kind is not None:
        raise RegistrationError(
            f"The versions of '{name}' serve {other_kind}, not {kind}: every version of a name is of one kind "
            "(register this model under another name)."
        )
    input_cost = validate_cost("cost_per_million_input_tokens", cost_per_million_input_tokens)
    output_cost = validate_cost("cost_per_million_output_tokens", cost_per_million_output_tokens)
    source, args = validate_registration(
        name=name,
        version=version,
        source_kind=source_kind,
        source_path=source_path,
        engine_args=engine_args,
        traffic_weight=traffic_weight,
    )
    try:
        with transaction.atomic():
            row = ModelDeployment.objects.create(
                name=name,
                version=version,
                kind=kind,
                source_kind=source_kind,
                source_path=source,
                engine_args=args,
                traffic_weight=traffic_weight,
                status=DeploymentStatus.REGISTERED,
                cost_per_million_input_tokens=input_cost,
                cost_per_million_output_tokens=output_cost,
            )
    except IntegrityError as exc:  # registered by someone else since the check
        raise RegistrationError(
            f"{deployment_key(name, version)} is already registered: register another version."
        ) from exc
    forget_cached()
    materialize_deployment(row)
    if make_default:
        make_default_deployment(row)
    return row


def materialize_deployment(row: ModelDeployment) -> ModelDeployment:
    """Copies ``row``'s weights into the model cache (``path``: serves them in place), verifies them and marks it
    ``ready`` with their checksum.

    Only a ``registered`` or ``failed`` row is materialized; the move to ``materializing`` is a conditional update,
    so two callers never copy the same deployment at once. A ``ready`` row is verified again in place: its files must
    still have the recorded checksum. On failure the row is ``failed`` with the reason and
    :class:`RegistrationError` is raised.
    """
    if row.status == DeploymentStatus.READY:
        return _verify_in_place(row, Path(row.local_path), expect=row.checksum)
    claimed = ModelDeployment.objects.filter(pk=row.pk, status__in=MATERIALIZABLE).update(
        status=DeploymentStatus.MATERIALIZING, status_reason="", updated_at=timezone.now()
    )
    if not claimed:
        row.refresh_from_db()
        raise RegistrationError(
            f"{row.key} is {row.status}: only a registered or failed deployment is materialized "
            "(register a new version to serve other weights)."
        )
    row.status, row.status_reason = DeploymentStatus.MATERIALIZING, ""
    forget_cached()
    try:
        local_path, checksum = _materialize_files(row)
    except Exception as exc:  # whatever broke, the row must not stay materializing
        raise _failed(row, _reason(exc)) from exc
    _mark_ready(row, local_path, checksum)
    logger.info("deployment %s ready at %s (sha256 %s)", row.key, local_path, checksum)
    return row


def make_default_deployment(row: ModelDeployment) -> None:
    """``row`` becomes the default deployment, in one transaction (the others lose ``is_default`` first: the
    ``one_default_deployment`` constraint is checked per statement)."""
    with transaction.atomic():
        ModelDeployment.objects.filter(is_default=True).exclude(pk=row.pk).update(is_default=False)
        ModelDeployment.objects.filter(pk=row.pk).update(is_default=True)
    row.is_default = True
    forget_cached()


def _materialize_files(row: ModelDeployment) -> tuple[Path, str]:
    """The verified local folder of ``row`` and its checksum."""
    if row.source_kind == SourceKind.PATH:
        folder = Path(row.source_path)
        return folder, verify_model_folder(folder, kind=row.kind)
    engine = settings.ENGINE
    target = engine.model_cache_dir / row.key
    if row.source_kind == SourceKind.PACKAGED and row.kind == DeploymentKind.EMBED:
        prepare_embedding_model(target, force=True)  # unpacks the package's zip into place (its own staging)
        try:
            return target, verify_model_folder(target, kind=row.kind)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    if row.source_kind == SourceKind.PACKAGED and not is_prepared(engine.default_model_dir):
        prepare_default_model(target, force=True)  # converts the GGUF straight into place (its own staging)
        try:
            return target, verify_model_folder(target, kind=row.kind)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    if row.source_kind == SourceKind.S3:
        return target, _download_verified(row.source_path, target, kind=row.kind)
    source = engine.default_model_dir if row.source_kind == SourceKind.PACKAGED else Path(row.source_path)
    return target, _copy_verified(source, target, kind=row.kind)


def _download_verified(url: str, target: Path, *, kind: str) -> str:
    """Downloads the store's folder at ``url`` into a staging sibling of ``target``, verifies it there, records its
    checksum in the marker (so a per-host cache on this host counts it as filled), then renames it into place."""
    location = parse_store_url(url)
    client = store_client()
    objects = list_folder(client, location)
    logger.info("downloading %s files (%.1f MB) from %s", len(objects), sum(o.size for o in objects) / 2**20, url)

    def download_and_verify(staging: Path) -> str:
        download_folder(client, location, objects, staging, progress=lambda files, done: None)
        checksum = verify_model_folder(staging, kind=kind)
        (staging / READY_MARKER).write_text(f"source={location.url}\nsha256={checksum}\n", encoding="utf-8")
        return checksum

    return write_staged(target, download_and_verify)


def _copy_verified(source: Path, target: Path, *, kind: str) -> str:
    """Copies ``source`` to a staging sibling of ``target``, verifies it there, then renames it into place."""
    if not source.is_dir():
        raise RegistrationError(f"The source folder {source} does not exist any more: restore it or register again.")

    def copy_and_verify(staging: Path) -> str:
        shutil.copytree(source, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(READY_MARKER))
        return verify_model_folder(staging, kind=kind)

    return write_staged(target, copy_and_verify)


def _verify_in_place(row: ModelDeployment, folder: Path, *, expect: str) -> ModelDeployment:
    """Verifies ``folder`` as ``row``'s weights (no copy); ``expect``: the checksum they must still have."""
    try:
        checksum = verify_model_folder(folder, kind=row.kind)
        if expect and checksum != expect:
            raise RegistrationError(
                f"The files in {folder} changed since {row.key} was verified (sha256 {checksum[:12]}…, recorded "
                f"{expect[:12]}…): register the new files as a new version."
            )
    except Exception as exc:  # whatever broke, the row records why
        raise _failed(row, _reason(exc)) from exc
    _mark_ready(row, folder, checksum)
    return row


def verify_in_place(row: ModelDeployment, folder: Path) -> ModelDeployment:
    """Verifies ``folder`` as ``row``'s weights (served in place) and marks it ``ready``; ``failed`` otherwise."""
    return _verify_in_place(row, folder, expect="")


def _mark_ready(row: ModelDeployment, folder: Path, checksum: str) -> None:
    keep_ready_at = row.status == DeploymentStatus.READY and row.ready_at is not None
    row.status = DeploymentStatus.READY
    row.status_reason = ""
    row.local_path = str(folder)
    row.checksum = checksum
    row.ready_at = row.ready_at if keep_ready_at else timezone.now()
    row.save(update_fields=["status", "status_reason", "local_path", "checksum", "ready_at", "updated_at"])
    forget_cached()


def _failed(row: ModelDeployment, reason: str) -> RegistrationError:
    """Marks ``row`` failed with ``reason`` (nothing else changes) and returns the error to raise."""
    row.status = DeploymentStatus.FAILED
    row.status_reason = reason
    row.save(update_fields=["status", "status_reason", "updated_at"])
    forget_cached()
    logger.warning("deployment %s failed: %s", row.key, reason)
    return RegistrationError(f"{row.key} failed: {reason}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, DomainError):
        return exc.message
    if isinstance(exc, ModelPreparationError):
        return f"preparing the packaged model failed: {exc}"
    if isinstance(exc, OSError):
        return f"copying the model failed: {exc}"
    return f"{exc.__class__.__name__}: {exc}"


# --- the default deployment --------------------------------------------------------------------------------------


def prepare_default_deployment(*, force: bool = False) -> str:
    """What ``manage.py prepare_model`` does: prepares the default model folder (packaged: converts the GGUF once),
    then verifies the default deployment in place and marks it ``ready`` with its checksum. Returns what it did.

    The deployments table may not exist yet (``prepare_model`` runs before the migrations in some scripts): then
    only the folder is prepared. A default deployment already ``ready`` with a checksum is not hashed again
    unless the folder was rebuilt (or ``force``): every worker start runs this.
    """
    engine = settings.ENGINE
    rebuilt = False
    if not engine.model:
        rebuilt = prepare_default_model(engine.default_model_dir, force=force)
        done = f"{engine.default_model_dir} {'prepared' if rebuilt else 'already present'}"
    else:
        done = f"serving {engine.model} (ENGINE_MODEL)"
    try:
        row = ModelDeployment.objects.filter(is_default=True).first()
    except (ProgrammingError, OperationalError) as exc:
        return f"{done}; the deployments table is not there yet ({exc.__class__.__name__}): migrate, then run again"
    if row is None:
        return f"{done}; there is no default deployment to verify"
    if row.status in (DeploymentStatus.DRAINING, DeploymentStatus.RETIRED):
        return f"{done}; {row.key} is {row.status}: left as it is"
    moved = _follow_the_settings(row)
    if row.status == DeploymentStatus.READY and row.checksum and not (rebuilt or force or moved):
        return f"{done}; {row.key} already ready (sha256 {row.checksum[:12]}…)"
    local = row.local_path or engine.model_path
    if not (Path(local).is_absolute() or local.startswith(".")):
        return _ready_unverified(row, local, done)
    _verify_in_place(row, Path(local), expect="")
    return f"{done}; {row.key} ready (sha256 {row.checksum[:12]}…)"


def _follow_the_settings(row: ModelDeployment) -> bool:
    """The migrated default deployment (the packaged model, or ``ENGINE_MODEL``'s folder) follows the settings it
    was made from: after ``MODEL_CACHE_DIR`` or ``ENGINE_MODEL`` changed, it points at their folder again (verified
    next). A deployment registered by hand keeps its own copy. True when it moved."""
    engine = settings.ENGINE
    from_settings = row.source_kind == SourceKind.PACKAGED or (
        row.source_kind == SourceKind.PATH and row.source_path == row.local_path
    )
    if not from_settings or row.local_path == engine.model_path:
        return False
    if row.source_kind == SourceKind.PACKAGED and Path(row.local_path).name != engine.default_model_dir.name:
        return False  # a packaged version copied into a folder of its own (``name@version``) by deployment_register
    row.local_path = engine.model_path
    row.source_kind = SourceKind.PATH if engine.model else SourceKind.PACKAGED
    row.source_path = engine.model
    row.save(update_fields=["local_path", "source_kind", "source_path", "updated_at"])
    forget_cached()
    return True


def _ready_unverified(row: ModelDeployment, model: str, done: str) -> str:
    """``ENGINE_MODEL`` names a model the operator cached locally (not a folder): vLLM resolves it; nothing here
    can verify it, so the default deployment is ready unverified, and says so."""
    row.status = DeploymentStatus.READY
    row.status_reason = f"not verified: {model} is a model name, not a local folder"
    row.local_path = model
    row.ready_at = row.ready_at or timezone.now()
    row.save(update_fields=["status", "status_reason", "local_path", "ready_at", "updated_at"])
    forget_cached()
    return f"{done}; {row.key} ready, {row.status_reason}"
