"""Where a worker host finds its copy of a deployment's weights: the shared cache, or its own filled from the store.

``MODEL_CACHE_MODE=shared`` (the default): the copy registration made (``local_path``) is on a mount every host
sees, and a worker loads it as it is. ``MODEL_CACHE_MODE=per_host``: each host keeps its own copies in
``MODEL_CACHE_DIR/<name>@<version>``. A worker whose copy of an ``s3`` deployment is missing, or whose marker does
not record the deployment's checksum, fills it (:func:`fill_from_store`): the store's files into a staging folder,
the SHA-256 over them compared with the one registration recorded, a ``.prepared`` marker recording it, and only
then the rename into place. A mismatch or a store that does not answer is a :class:`HostCacheError`: nothing is
put in place, and the worker refuses to serve. Other sources are not in a store: their copy must already be on
the host (the error says how to get it there).

Each step is logged and reported in Redis (``deployment:{name@version}:host_caches``, one entry per worker: state
``filling`` with files and bytes done, ``ready``, or ``failed`` with the reason), which the admin shows beside the
deployment's live workers.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import redis
from django.conf import settings

from core.errors import DomainError
from core.redis_client import get_redis
from deployments.model_files import READY_MARKER, write_staged
from deployments.model_store import ModelStoreError, download_folder, list_folder, parse_store_url, store_client
from deployments.models import SourceKind, deployment_key
from deployments.verification import folder_checksum

logger = logging.getLogger(__name__)

SHARED = "shared"
PER_HOST = "per_host"
_MB = 1 << 20


class HostCacheError(DomainError):
    """This host has no verified copy of the deployment and cannot make one; the message says why and what to do."""

    code = "host_cache_failed"


class HostCacheState(StrEnum):
    FILLING = "filling"
    """Downloading the store's files into a staging folder (progress in files and bytes)."""
    VERIFYING = "verifying"
    """Hashing the downloaded files to compare with the deployment's recorded checksum."""
    READY = "ready"
    """The host's copy is verified and in place: the worker builds its engine from it."""
    FAILED = "failed"
    """No verified copy (checksum mismatch, store unreachable, missing files): the worker refuses to serve."""


@dataclass(frozen=True)
class HostCacheStatus:
    """One worker's report on its copy of a deployment (what the admin shows)."""

    worker: str
    host: str
    state: str
    path: str = ""
    reason: str = ""
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    updated_at: float = 0.0

    def summary(self) -> str:
        if self.state == HostCacheState.FILLING:
            return (
                f"{self.worker}: filling {self.files_done}/{self.files_total} files, "
                f"{self.bytes_done / _MB:.1f}/{self.bytes_total / _MB:.1f} MB"
            )
        if self.state == HostCacheState.FAILED:
            return f"{self.worker}: failed: {self.reason}"
        return f"{self.worker}: {self.state}{f' at {self.path}' if self.path else ''}"


def host_cache_key(key: str) -> str:
    """The Redis hash of ``name@version``'s per-worker cache reports (field: the worker's name)."""
    return f"deployment:{key}:host_caches"


def host_cache_statuses(keys: list[str], *, client: redis.Redis | None = None) -> dict[str, list[HostCacheStatus]]:
    """Each of ``keys``' workers' last reports on their copies, by worker name (one round trip; raises
    ``redis.RedisError``)."""
    pipe = (client or get_redis()).pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(host_cache_key(key))
    statuses: dict[str, list[HostCacheStatus]] = {}
    for key, raw in zip(keys, pipe.execute(), strict=True):
        found = []
        for value in raw.values():
            try:
                found.append(HostCacheStatus(**json.loads(value)))
            except (TypeError, ValueError):
                continue  # a report of another shape: skip it rather than break the admin page
        statuses[key] = sorted(found, key=lambda status: status.worker)
    return statuses


class Reporter:
    """Logs a worker's fill and writes its state to Redis; a Redis that does not answer costs only the report."""

    def __init__(self, *, key: str, worker: str) -> None:
        self.key = key
        self.worker = worker or socket.gethostname()
        self.host = socket.gethostname()
        self._last_progress = float("-inf")

    def report(self, state: HostCacheState, **fields: Any) -> None:
        status = HostCacheStatus(worker=self.worker, host=self.host, state=state, updated_at=time.time(), **fields)
        try:
            pipe = get_redis().pipeline(transaction=False)
            pipe.hset(host_cache_key(self.key), self.worker, json.dumps(asdict(status)))
            pipe.expire(host_cache_key(self.key), settings.MODEL_STORE.status_ttl_s)
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("model cache %s: could not report %s to Redis (%s)", self.key, state, exc)

    def progress(self, *, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        """Logs and reports progress at most every ``MODEL_CACHE_PROGRESS_INTERVAL_S`` (and at the last file)."""
        now = time.monotonic()
        if files_done < files_total and now - self._last_progress < settings.MODEL_STORE.progress_interval_s:
            return
        self._last_progress = now
        logger.info(
            "model cache %s: filling, %s/%s files, %.1f/%.1f MB",
            self.key,
            files_done,
            files_total,
            bytes_done / _MB,
            bytes_total / _MB,
        )
        self.report(
            HostCacheState.FILLING,
            files_done=files_done,
            files_total=files_total,
            bytes_done=bytes_done,
            bytes_total=bytes_total,
        )

    def failed(self, reason: str) -> None:
        logger.error("model cache %s: failed: %s", self.key, reason)
        self.report(HostCacheState.FAILED, reason=reason)


def host_copy(
    *,
    name: str,
    version: str,
    source_kind: str,
    source_path: str,
    local_path: str,
    checksum: str,
    worker: str = "",
) -> Path:
    """The folder this host's worker loads for the deployment, filled and verified first where it must be.

    ``shared``: ``local_path`` as registration left it. ``per_host``: this host's own copy (see the module doc);
    raises :class:`HostCacheError` (reported ``failed``) when there is no verified copy and none can be made."""
    key = deployment_key(name, version)
    if settings.MODEL_STORE.cache_mode != PER_HOST:
        return Path(local_path)
    reporter = Reporter(key=key, worker=worker)
    try:
        folder = _per_host_copy(
            key=key,
            source_kind=source_kind,
            source_path=source_path,
            local_path=local_path,
            checksum=checksum,
            reporter=reporter,
        )
    except HostCacheError as exc:
        reporter.failed(exc.message)
        raise
    reporter.report(HostCacheState.READY, path=str(folder))
    return folder


def _per_host_copy(
    *, key: str, source_kind: str, source_path: str, local_path: str, checksum: str, reporter: Reporter
) -> Path:
    cache_dir = settings.ENGINE.model_cache_dir
    if source_kind == SourceKind.S3:
        target = cache_dir / key
        with _host_lock(cache_dir, key):
            if recorded_checksum(target) == checksum and checksum:
                logger.info("model cache %s: %s holds the verified copy (sha256 %s…)", key, target, checksum[:12])
                return target
            fill_from_store(key=key, source_path=source_path, checksum=checksum, target=target, reporter=reporter)
        return target
    if source_kind == SourceKind.PATH:
        if not (Path(local_path).is_absolute() or local_path.startswith(".")):
            return Path(local_path)  # a model name (ENGINE_MODEL) the operator cached on each host: vLLM resolves it
        folder = Path(local_path)
        hint = "mount it on this host (it is served in place, never copied)"
    elif source_kind == SourceKind.PACKAGED:
        folder = cache_dir / Path(local_path).name  # the default model's folder, or name@version
        hint = "run `manage.py prepare_model` on this host for the default model; register other versions from a store"
    else:
        folder = cache_dir / key
        hint = "registration copied it on the host that registered it only"
    if not folder.is_dir():
        raise HostCacheError(
            f"{key} ({source_kind}) has no copy on this host at {folder} (MODEL_CACHE_MODE=per_host): {hint}. "
            "To fill per-host caches, publish the folder (manage.py model_store_push FOLDER s3://bucket/prefix/) "
            "and register it as a new version with --source s3://bucket/prefix/; or use MODEL_CACHE_MODE=shared with "
            "MODEL_CACHE_DIR on a mount every host sees."
        )
    return folder


def recorded_checksum(folder: Path) -> str:
    """The ``sha256=`` a fill wrote into ``folder``'s marker once it verified it ("" when there is none)."""
    try:
        lines = (folder / READY_MARKER).read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("sha256="):
            return line.removeprefix("sha256=").strip()
    return ""


def fill_from_store(*, key: str, source_path: str, checksum: str, target: Path, reporter: Reporter) -> Path:
    """Downloads the store's copy of ``key`` into a staging sibling of ``target``, checks its SHA-256 against
    ``checksum`` (the one registration recorded), writes the marker and renames it into place.

    A copy already at ``target`` that is not verified is removed first: nothing but a verified copy is ever left
    there. Raises :class:`HostCacheError` (nothing in place) for a checksum mismatch or a failing store."""
    if not checksum:
        raise HostCacheError(f"{key} has no recorded checksum: register it again (its copy cannot be verified).")
    try:
        location = parse_store_url(source_path)
    except ModelStoreError as exc:
        raise HostCacheError(f"{key}: {exc.message}") from exc
    if target.exists():
        logger.warning("model cache %s: %s is not a verified copy of it; filling it again", key, target)
        shutil.rmtree(target)
    started = time.monotonic()
    logger.info("model cache %s: filling %s from %s", key, target, location.url)
    try:
        client = store_client()
        objects = list_folder(client, location)
    except ModelStoreError as exc:
        raise HostCacheError(f"{key}: {exc.message}") from exc
    files_total, bytes_total = len(objects), sum(obj.size for obj in objects)
    reporter.progress(files_done=0, files_total=files_total, bytes_done=0, bytes_total=bytes_total)

    def fill(staging: Path) -> None:
        download_folder(
            client,
            location,
            objects,
            staging,
            progress=lambda files, done: reporter.progress(
                files_done=files, files_total=files_total, bytes_done=done, bytes_total=bytes_total
            ),
        )
        reporter.report(HostCacheState.VERIFYING, files_done=files_total, files_total=files_total)
        found = folder_checksum(staging)
        if found != checksum:
            raise HostCacheError(
                f"{key}: checksum mismatch: the store's copy at {location.url} has sha256 {found[:12]}…, the "
                f"deployment recorded {checksum[:12]}…; its files changed since registration. Publish the registered "
                "files again, or register the store's files as a new version. Nothing was put in place."
            )
        (staging / READY_MARKER).write_text(f"source={location.url}\nsha256={checksum}\n", encoding="utf-8")

    try:
        write_staged(target, fill)
    except ModelStoreError as exc:
        raise HostCacheError(f"{key}: {exc.message}") from exc
    except OSError as exc:
        raise HostCacheError(f"{key}: writing {target} failed: {exc}") from exc
    logger.info(
        "model cache %s: %s files, %.1f MB filled and verified (sha256 %s…) in %.1f s",
        key,
        files_total,
        bytes_total / _MB,
        checksum[:12],
        time.monotonic() - started,
    )
    return target


@contextmanager
def _host_lock(cache_dir: Path, key: str) -> Iterator[None]:
    """One fill of ``key`` at a time on this host (two workers of one deployment start together)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / f".{key}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
