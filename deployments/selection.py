"""Which deployment serves a request: ``model`` as clients send it, resolved against the registered deployments.

* ``name`` picks among that name's ``ready`` versions that have a ready worker, at random by ``traffic_weight``
  (each run picks again, so a rollout's weights move unpinned chats too);
* ``name@version`` pins one version;
* nothing (a UI chat, ``POST /api/chats`` without ``model``): the default deployment's name.

Each deployment has a kind (``generate`` or ``embed``): a chat or a completion never goes to an embedding model,
nor ``/v1/embeddings`` to a chat model (a 404 ``model_wrong_kind`` that names the model's kind, as OpenAI answers
404 for a model the endpoint does not serve).

An unknown name, or a version that is not served (retired, failed, draining, never registered), is a 404
``model_not_found`` that names the models there are; a malformed ``model`` is a 400 ``invalid_model``; a known
model that has no ready worker (or a version still materializing) is a 503 with ``Retry-After``. Every refusal
comes before anything is written.

The web processes read the deployments from Postgres at most every ``DEPLOYMENT_CACHE_S`` and the ready workers
from Redis at most every ``DEPLOYMENT_WORKERS_CACHE_S`` (per process), so a prompt pays no round trip for this;
a weight change reaches every process within that bound.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from core.errors import DomainError
from deployments.models import NAME_PATTERN, DeploymentKind, DeploymentStatus, ModelDeployment, deployment_key
from generation.worker_contract import ready_worker_counts

_NAME = re.compile(NAME_PATTERN)
RETRY_AFTER_S = 5
AUTO_MODEL = "auto"
"""``model: "auto"``: the router (a pass around the run, ``runs.passes``) picks the deployment per prompt."""


class ModelNotFound(DomainError):
    status_code = 404
    code = "model_not_found"


class WrongModelKind(DomainError):
    """The model exists but serves the other kind of request (an embedding model asked to chat, say)."""

    status_code = 404
    code = "model_wrong_kind"


KIND_WORDS: dict[str, str] = {
    DeploymentKind.GENERATE: "a text-generation model",
    DeploymentKind.EMBED: "an embedding model",
}
KIND_ENDPOINTS: dict[str, str] = {
    DeploymentKind.GENERATE: "/v1/chat/completions and /v1/completions",
    DeploymentKind.EMBED: "/v1/embeddings",
}


class InvalidModel(DomainError):
    code = "invalid_model"


class ModelUnavailable(DomainError):
    """A known model that cannot take a run right now: a 503 with ``Retry-After``; nothing was written."""

    status_code = 503
    code = "model_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass(frozen=True)
class Served:
    """What the serving path needs of one deployment (a snapshot: no database access through it)."""

    id: int
    name: str
    version: str
    status: str
    traffic_weight: int
    is_default: bool
    local_path: str
    engine_args: dict[str, Any] = field(default_factory=dict)
    kind: str = DeploymentKind.GENERATE
    auto: bool = False
    """Resolved from ``model: "auto"``: a stand-in (the default deployment, for tokenizing the request) that the
    routing pass replaces with the deployment it picks."""
    defaulted: bool = False
    """Resolved from no ``model`` at all (the default deployment): a tier whose default is ``auto`` routes it."""

    @property
    def key(self) -> str:
        return deployment_key(self.name, self.version)

    @property
    def is_ready(self) -> bool:
        return self.status == DeploymentStatus.READY


def _served(row: ModelDeployment) -> Served:
    return Served(
        id=row.pk,
        name=row.name,
        version=row.version,
        status=row.status,
        traffic_weight=row.traffic_weight,
        is_default=row.is_default,
        local_path=row.local_path,
        engine_args=dict(row.engine_args or {}),
        kind=row.kind,
    )


class Snapshot:
    """A per-process copy of a read that may be ``max_age_s`` old (thread-safe; one reader refreshes it)."""

    def __init__(self, read: Callable[[], Any], max_age: Callable[[], float]) -> None:
        self.read = read
        self.max_age = max_age
        self._value: Any = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self) -> Any:
        if time.monotonic() - self._at > self.max_age():
            with self._lock:
                if time.monotonic() - self._at > self.max_age():
                    self._value = self.read()
                    self._at = time.monotonic()
        return self._value

    def clear(self) -> None:
        with self._lock:
            self._at = float("-inf")


def _read_deployments() -> list[Served]:
    return [_served(row) for row in ModelDeployment.objects.order_by("name", "-created_at", "-id")]


def _read_ready_workers() -> dict[str, int]:
    keys = [d.key for d in _deployments.get() if d.is_ready or d.status == DeploymentStatus.DRAINING]
    return ready_worker_counts(keys)


_deployments = Snapshot(_read_deployments, lambda: settings.DEPLOYMENTS.cache_s)
_ready_workers = Snapshot(_read_ready_workers, lambda: settings.DEPLOYMENTS.workers_cache_s)


def forget_cached() -> None:
    """The next read goes to Postgres and Redis again (after a write here, and between tests)."""
    _deployments.clear()
    _ready_workers.clear()


def served_deployments() -> list[Served]:
    """Every deployment, newest version of each name first (at most ``DEPLOYMENT_CACHE_S`` old)."""
    return list(_deployments.get())


def ready_workers(key: str) -> int:
    """Workers of the deployment ``key`` that heartbeat ready (at most ``DEPLOYMENT_WORKERS_CACHE_S`` old)."""
    return int(_ready_workers.get().get(key, 0))


def deployment_by_id(deployment_id: int | None) -> Served | None:
    """The deployment with that id (from the snapshot; re-read once if it is newer than the snapshot)."""
    if deployment_id is None:
        return None
    found = next((d for d in served_deployments() if d.id == deployment_id), None)
    if found is None:
        _deployments.clear()
        found = next((d for d in served_deployments() if d.id == deployment_id), None)
    return found


def default_deployment() -> Served | None:
    return next((d for d in served_deployments() if d.is_default), None)


def available_models(kind: str | None = None) -> list[str]:
    """What a client may send: each name with a ready version, each ready ``name@version`` (of ``kind`` only, when
    given), then ``auto`` (the router's choice) while a text-generation model is ready."""
    ready = [d for d in served_deployments() if d.is_ready and kind in (None, d.kind)]
    names = sorted({d.name for d in ready})
    generates = kind in (None, DeploymentKind.GENERATE) and any(d.kind == DeploymentKind.GENERATE for d in ready)
    return names + sorted(d.key for d in ready) + ([AUTO_MODEL] if generates else [])


def parse_model(spec: str) -> tuple[str, str | None]:
    """``name`` or ``name@version`` as ``(name, version or None)``; :class:`InvalidModel` when it is neither."""
    name, at, version = spec.strip().partition("@")
    if not _NAME.match(name) or (at and not _NAME.match(version)):
        raise InvalidModel(
            f"'{spec[:200]}' is not a model: send 'name' or 'name@version' (letters, digits, '.', '_' and '-'), "
            f"one of: {', '.join(available_models()) or 'none yet'}."
        )
    return name, (version if at else None)


def _not_found(what: str, kind: str | None = None) -> ModelNotFound:
    available = ", ".join(available_models(kind)) or "none is ready yet"
    return ModelNotFound(f"The model '{what[:200]}' does not exist here. Available: {available}.")


def check_kind(spec: str, versions: list[Served], kind: str) -> None:
    """:class:`WrongModelKind` when ``spec``'s deployments serve another kind than ``kind``."""
    other = next((d.kind for d in versions if d.kind != kind), None)
    if other is None:
        return
    available = ", ".join(available_models(kind)) or "none is ready yet"
    raise WrongModelKind(
        f"The model '{spec[:200]}' is {KIND_WORDS.get(other, other)}: it serves {KIND_ENDPOINTS.get(other, other)}, "
        f"not this endpoint. Use {KIND_WORDS.get(kind, kind)}: {available}."
    )


def resolve_model(spec: str | None, *, rng: random.Random | None = None, kind: str = DeploymentKind.GENERATE) -> Served:
    """The deployment that serves a run for ``spec`` (see the module doc for the rules and the errors); ``kind``:
    what the request needs (an ``embed`` request names its model: there is no default embedding model)."""
    auto = spec is not None and spec.strip().lower() == AUTO_MODEL
    if spec is None or not spec.strip() or auto:
        default = default_deployment()
        if default is None:
            raise ModelUnavailable("No default model is configured: name one with 'model'.")
        if kind == DeploymentKind.GENERATE:
            stand_in = resolve_model(default.name, rng=rng)
            return replace(stand_in, auto=True) if auto else replace(stand_in, defaulted=True)
        spec = default.name
    name, version = parse_model(spec)
    versions = [d for d in served_deployments() if d.name == name]
    if not versions:
        raise _not_found(spec, kind)
    check_kind(spec, versions, kind)
    if version is not None:
        return _pinned(spec, next((d for d in versions if d.version == version), None), kind)
    return _by_weight(name, versions, rng or random, kind)


def check_model(spec: str) -> str:
    """``spec`` stripped, once it names a model that is served or being prepared (for a chat's ``model``: no worker
    is needed yet); :class:`InvalidModel` or :class:`ModelNotFound` otherwise. Empty stays empty (the default)."""
    spec = spec.strip()
    if not spec:
        return ""
    if spec.lower() == AUTO_MODEL:
        return AUTO_MODEL
    name, version = parse_model(spec)
    live = (DeploymentStatus.RETIRED, DeploymentStatus.FAILED, DeploymentStatus.DRAINING)
    versions = [d for d in served_deployments() if d.name == name and d.status not in live]
    if not versions or (version is not None and all(d.version != version for d in versions)):
        raise _not_found(spec, DeploymentKind.GENERATE)
    check_kind(spec, versions, DeploymentKind.GENERATE)  # a chat's model generates
    return spec


def _pinned(spec: str, found: Served | None, kind: str = DeploymentKind.GENERATE) -> Served:
    if found is None or found.status in (DeploymentStatus.RETIRED, DeploymentStatus.FAILED):
        raise _not_found(spec, kind)
    if found.status == DeploymentStatus.DRAINING:
        raise ModelNotFound(
            f"The model '{spec}' is draining and takes no new runs. Available: {', '.join(available_models(kind))}."
        )
    if not found.is_ready:
        raise ModelUnavailable(f"The model '{spec}' is still being prepared ({found.status}); retry shortly.")
    if ready_workers(found.key) == 0:
        raise ModelUnavailable(f"The model '{spec}' has no ready worker right now; retry shortly.")
    return found


def _by_weight(
    name: str, versions: list[Served], rng: random.Random | Any, kind: str = DeploymentKind.GENERATE
) -> Served:
    ready = [d for d in versions if d.is_ready]
    if not ready:
        if any(d.status in (DeploymentStatus.REGISTERED, DeploymentStatus.MATERIALIZING) for d in versions):
            raise ModelUnavailable(f"The model '{name}' is still being prepared; retry shortly.")
        raise _not_found(name, kind)
    weighted = [d for d in ready if d.traffic_weight > 0] or ready[:1]  # all at 0: the newest ready version
    serving = [d for d in weighted if ready_workers(d.key) > 0]
    if not serving:
        raise ModelUnavailable(f"The model '{name}' has no ready worker right now; retry shortly.")
    return pick_by_weight(serving, rng)


def pick_by_weight(candidates: list[Served], rng: random.Random | Any) -> Served:
    """One of ``candidates`` with probability proportional to its weight (equal chances when all are 0)."""
    weights = [max(0, d.traffic_weight) for d in candidates]
    if sum(weights) == 0:
        return candidates[int(rng.random() * len(candidates)) % len(candidates)]
    chosen: Served = rng.choices(candidates, weights=weights, k=1)[0]
    return chosen
