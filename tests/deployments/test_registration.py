"""Registering a deployment copies its weights into the model cache, verifies and checksums them, and only then
makes it ``ready``; bad input is refused before anything is written, and a broken source leaves the row ``failed``
with the reason and nothing else changed.

The packaged copies come from the real prepared default folder (``prepare_model`` runs before the suite); the model
cache is a temporary folder whose ``SmolLM2-135M-Instruct`` entry links to it, so ``ENGINE.default_model_dir``
still names a prepared folder.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.db.utils import ProgrammingError
from django.test import Client
from pytest_django.fixtures import Settings

from core.redis_client import get_redis
from deployments import admin as deployments_admin
from deployments.model_files import READY_MARKER, is_prepared
from deployments.models import DeploymentStatus, ModelDeployment, SourceKind
from deployments.registration import (
    RegistrationError,
    folder_checksum,
    materialize_deployment,
    prepare_default_deployment,
    register_deployment,
)
from generation.worker_contract import WorkerHeartbeat, WorkerState, write_heartbeat
from runs.models import RunStatus
from tests.deployment_helpers import add_version
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

REAL_DEFAULT_DIR: Path = django_settings.ENGINE.default_model_dir
WEIGHTS = "model.safetensors"


@pytest.fixture(scope="session")
def default_checksum() -> str:
    """The checksum of the prepared default folder (what every faithful copy of it must have)."""
    assert is_prepared(REAL_DEFAULT_DIR), "run `manage.py prepare_model` before the tests"
    return folder_checksum(REAL_DEFAULT_DIR)


@pytest.fixture
def model_cache(settings: Settings, tmp_path: Path) -> Iterator[Path]:
    """``ENGINE.model_cache_dir`` in ``tmp_path``, its default model folder a link to the real prepared one.

    Removed afterwards: each copy of the weights is half a gigabyte, and pytest keeps its last temporary folders."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / REAL_DEFAULT_DIR.name).symlink_to(REAL_DEFAULT_DIR, target_is_directory=True)
    settings.ENGINE = dataclasses.replace(settings.ENGINE, model_cache_dir=cache)
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


def clone_model(target: Path, *, skip: Iterable[str] = ()) -> Path:
    """A copy of the default folder at ``target`` (without the files in ``skip`` and the ``.prepared`` marker).

    The weights are hard-linked (fast, and never written through: a test that breaks them replaces the file)."""
    target.mkdir(parents=True)
    for source in REAL_DEFAULT_DIR.iterdir():
        if source.name in {READY_MARKER, *skip}:
            continue
        if source.name == WEIGHTS:
            try:
                os.link(source, target / source.name)
                continue
            except OSError:
                pass  # another filesystem: copy it
        shutil.copy2(source, target / source.name)
    return target


def replace_file(path: Path, content: bytes) -> None:
    """Writes ``path`` anew (unlinking it first, so a hard link to the real default model is never written)."""
    path.unlink(missing_ok=True)
    path.write_bytes(content)


@pytest.fixture
def hf_source(tmp_path: Path) -> Path:
    return clone_model(tmp_path / "source" / "smol-hf")


def deployments_snapshot() -> list[tuple[Any, ...]]:
    return list(
        ModelDeployment.objects.order_by("pk").values_list(
            "pk", "status", "traffic_weight", "is_default", "checksum", "local_path"
        )
    )


def cache_entries(cache: Path) -> list[str]:
    """What the model cache holds besides the default model's link (staging folders start with a dot)."""
    return sorted(entry.name for entry in cache.iterdir() if entry.name != REAL_DEFAULT_DIR.name)


def run_command(*args: str) -> str:
    out = StringIO()
    call_command("deployment_register", *args, stdout=out)
    return out.getvalue()


# --- registration that succeeds ---------------------------------------------------------------------------------


def test_packaged_registration_copies_the_default_and_takes_the_default(
    model_cache: Path, default_checksum: str
) -> None:
    old_default = ModelDeployment.objects.get(is_default=True)

    out = run_command("smol", "v2", "--engine-arg", "max_model_len=1024", "--weight", "10", "--default")

    row = ModelDeployment.objects.get(name="smol", version="v2")
    assert row.status == DeploymentStatus.READY and row.status_reason == ""
    assert row.source_kind == SourceKind.PACKAGED and row.engine_args == {"max_model_len": 1024}
    assert row.traffic_weight == 10 and row.ready_at is not None
    local = Path(row.local_path)
    assert local == model_cache / "smol@v2" and local.is_dir() and not local.is_symlink()
    assert (local / WEIGHTS).stat().st_ino != (REAL_DEFAULT_DIR / WEIGHTS).stat().st_ino  # a copy, not a link
    assert row.checksum == default_checksum
    assert cache_entries(model_cache) == ["smol@v2"]  # no staging folder left behind
    assert f"smol@v2: ready (default)\n  local_path: {local}\n  checksum:   {default_checksum}" in out
    assert row.is_default
    old_default.refresh_from_db()
    assert not old_default.is_default
    assert list(ModelDeployment.objects.filter(is_default=True)) == [row]


def test_hf_folder_registration_copies_the_folder(model_cache: Path, hf_source: Path, default_checksum: str) -> None:
    before = deployments_snapshot()

    row = register_deployment(name="smol", version="v3", source_kind=SourceKind.HF_FOLDER, source_path=str(hf_source))

    assert row.status == DeploymentStatus.READY
    assert row.source_path == str(hf_source.resolve())
    assert Path(row.local_path) == model_cache / "smol@v3"
    assert row.checksum == default_checksum  # same bytes as the default (the .prepared marker is left out)
    assert not row.is_default and row.traffic_weight == 0
    assert deployments_snapshot()[: len(before)] == before  # nothing else changed
    shutil.rmtree(hf_source)
    assert materialize_deployment(row).status == DeploymentStatus.READY  # the copy stands on its own


def test_serve_in_place_verifies_without_copying_and_notices_changed_files(
    model_cache: Path, hf_source: Path, default_checksum: str
) -> None:
    out = run_command("smol", "v4", "--source", str(hf_source), "--serve-in-place")

    row = ModelDeployment.objects.get(name="smol", version="v4")
    assert row.source_kind == SourceKind.PATH and row.status == DeploymentStatus.READY
    assert row.local_path == str(hf_source.resolve()) and f"local_path: {hf_source}" in out
    assert row.checksum == default_checksum
    assert cache_entries(model_cache) == []
    ready_at = row.ready_at

    again = materialize_deployment(row)  # verified again: unchanged files, the same checksum
    again.refresh_from_db()
    assert again.status == DeploymentStatus.READY and again.checksum == default_checksum
    assert again.ready_at == ready_at

    replace_file(hf_source / "generation_config.json", b'{"max_new_tokens": 7}')
    with pytest.raises(RegistrationError, match="changed since smol@v4 was verified"):
        materialize_deployment(again)
    again.refresh_from_db()
    assert again.status == DeploymentStatus.FAILED and "changed since" in again.status_reason


# --- refusals and failures --------------------------------------------------------------------------------------


def _no_tokenizer(folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink()


def _config_not_json(folder: Path) -> None:
    replace_file(folder / "config.json", b'{"architectures": ["LlamaForCausalLM"],')


def _no_weights(folder: Path) -> None:
    (folder / WEIGHTS).unlink()


def _corrupt_weights(folder: Path) -> None:
    replace_file(folder / WEIGHTS, b"not a safetensors file")


def _no_chat_template(folder: Path) -> None:
    (folder / "chat_template.jinja").unlink()


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        (_no_tokenizer, "has no tokenizer files"),
        (_config_not_json, "config.json is not valid JSON"),
        (_no_weights, "holds no weights"),
        (_corrupt_weights, "does not open as safetensors"),
        (_no_chat_template, "has no chat template"),
    ],
    ids=["no-tokenizer", "config-not-json", "no-weights", "corrupt-weights", "no-chat-template"],
)
def test_a_broken_source_fails_with_the_reason_and_changes_nothing_else(
    model_cache: Path, hf_source: Path, breakage: Callable[[Path], None], reason: str
) -> None:
    breakage(hf_source)
    before = deployments_snapshot()

    with pytest.raises(RegistrationError, match=reason):
        register_deployment(
            name="smol",
            version="broken",
            source_kind=SourceKind.HF_FOLDER,
            source_path=str(hf_source),
            traffic_weight=50,
            make_default=True,
        )

    row = ModelDeployment.objects.get(name="smol", version="broken")
    assert row.status == DeploymentStatus.FAILED and reason in row.status_reason
    assert row.checksum == "" and row.local_path == "" and row.ready_at is None and not row.is_default
    assert cache_entries(model_cache) == []  # the partial copy is gone
    assert [r for r in deployments_snapshot() if r[0] != row.pk] == before


def test_the_command_reports_a_broken_source(model_cache: Path, hf_source: Path) -> None:
    _no_weights(hf_source)
    with pytest.raises(CommandError, match="holds no weights"):
        run_command("smol", "v5", "--source", str(hf_source))
    assert ModelDeployment.objects.get(name="smol", version="v5").status == DeploymentStatus.FAILED


def test_a_missing_source_folder_is_refused_before_any_row_is_written(model_cache: Path, tmp_path: Path) -> None:
    before = deployments_snapshot()
    missing = tmp_path / "nowhere"
    with pytest.raises(RegistrationError, match="does not exist"):
        register_deployment(name="smol", version="v6", source_kind=SourceKind.HF_FOLDER, source_path=str(missing))
    with pytest.raises(CommandError, match="does not exist"):
        run_command("smol", "v6", "--source", str(missing), "--serve-in-place")
    assert deployments_snapshot() == before and cache_entries(model_cache) == []


@pytest.mark.parametrize(
    ("engine_args", "message"),
    [
        ({"max_model_lenn": 1024}, "max_model_lenn (did you mean max_model_len"),
        ({"tokenizer": "/elsewhere"}, "may not set tokenizer"),
        ([1024], "must be a JSON object"),
    ],
    ids=["unknown", "reserved", "not-an-object"],
)
def test_bad_engine_args_are_refused_with_nothing_written(model_cache: Path, engine_args: Any, message: str) -> None:
    before = deployments_snapshot()
    with pytest.raises(RegistrationError, match=message.replace("(", r"\(")):
        register_deployment(name="smol", version="v7", source_kind=SourceKind.PACKAGED, engine_args=engine_args)
    assert deployments_snapshot() == before and cache_entries(model_cache) == []


def test_the_command_refuses_an_engine_arg_that_is_not_json(model_cache: Path) -> None:
    with pytest.raises(CommandError, match="not JSON"):
        run_command("smol", "v7", "--engine-arg", "dtype=float16")
    with pytest.raises(CommandError, match="needs --source PATH"):
        run_command("smol", "v7", "--serve-in-place")
    assert not ModelDeployment.objects.filter(name="smol").exists()


def test_a_registered_name_and_version_is_refused(model_cache: Path) -> None:
    default = ModelDeployment.objects.get(is_default=True)
    before = deployments_snapshot()
    with pytest.raises(RegistrationError, match=f"{default.key} is already registered"):
        register_deployment(name=default.name, version=default.version, source_kind=SourceKind.PACKAGED)
    with pytest.raises(RegistrationError, match="is not valid"):
        register_deployment(name="smol", version="v@8", source_kind=SourceKind.PACKAGED)
    assert deployments_snapshot() == before


# --- prepare_model and the default deployment -------------------------------------------------------------------


def test_prepare_model_verifies_the_default_deployment_in_place(model_cache: Path, default_checksum: str) -> None:
    ModelDeployment.objects.filter(is_default=True).update(status=DeploymentStatus.REGISTERED, checksum="")
    out = StringIO()
    call_command("prepare_model", stdout=out)

    default = ModelDeployment.objects.get(is_default=True)
    assert default.status == DeploymentStatus.READY and default.checksum == default_checksum
    # It follows MODEL_CACHE_DIR (here a folder linking the real model): verified where the settings say it is.
    assert default.local_path == django_settings.ENGINE.model_path and cache_entries(model_cache) == []
    assert Path(default.local_path).resolve() == REAL_DEFAULT_DIR.resolve()
    assert "already present" in out.getvalue() and f"{default.key} ready" in out.getvalue()
    assert "already ready" in prepare_default_deployment()  # not hashed again at every worker start


def test_prepare_model_without_the_deployments_table_only_prepares_the_folder(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_table(*args: Any, **kwargs: Any) -> Any:
        raise ProgrammingError('relation "deployments_modeldeployment" does not exist')

    monkeypatch.setattr(ModelDeployment.objects, "filter", no_table)
    assert "the deployments table is not there yet" in prepare_default_deployment()


# --- the admin --------------------------------------------------------------------------------------------------


def _heartbeat(worker: str, deployment: str, state: str) -> None:
    beat = WorkerHeartbeat(
        worker=worker,
        model="SmolLM2-135M-Instruct",
        model_version="v1",
        max_slots=4,
        running=1,
        waiting=0,
        kv_cache_usage=0.1,
        tpot_s=None,
        active_runs=1,
        updated_at=time.time(),
        deployment=deployment,
        state=state,
    )
    write_heartbeat(beat, ttl_s=60, client=get_redis())


def test_the_changelist_shows_live_workers_and_runs(admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    default = ModelDeployment.objects.get(is_default=True)
    other = add_version("v2", weight=0, worker=False)
    _heartbeat("box-1@gpu", default.key, WorkerState.READY)
    _heartbeat("box-2@gpu", default.key, WorkerState.DRAINING)
    RunFactory.create(deployment=default, status=RunStatus.STREAMING)
    RunFactory.create(deployment=default, status=RunStatus.DONE)
    reads: list[int] = []
    real_read = deployments_admin.worker_heartbeats

    def counted_read() -> list[WorkerHeartbeat]:
        reads.append(1)
        return real_read()

    monkeypatch.setattr(deployments_admin, "worker_heartbeats", counted_read)

    page = admin_client.get("/admin/deployments/modeldeployment/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "2: box-1@gpu (ready), box-2@gpu (draining)" in html
    assert '<td class="field-active_runs">1</td>' in html
    assert '<td class="field-runs_last_hour">2</td>' in html
    assert other.key in html and 'name="form-0-traffic_weight"' in html
    assert len(reads) == 1  # once for the page, not once per row

    assert admin_client.get(f"/admin/deployments/modeldeployment/{default.pk}/change/").status_code == 200
    assert admin_client.get("/admin/deployments/rollout/").status_code == 200
    assert admin_client.get("/admin/deployments/rollout/add/").status_code == 403


def test_the_admin_action_materializes_registered_and_failed_rows(
    admin_client: Client, model_cache: Path, hf_source: Path, tmp_path: Path, default_checksum: str
) -> None:
    broken = clone_model(tmp_path / "source" / "broken", skip=[WEIGHTS])
    good = ModelDeployment.objects.create(
        name="smol", version="v10", source_kind=SourceKind.HF_FOLDER, source_path=str(hf_source)
    )
    bad = ModelDeployment.objects.create(
        name="smol", version="v11", source_kind=SourceKind.HF_FOLDER, source_path=str(broken),
        status=DeploymentStatus.FAILED, status_reason="an earlier try",
    )  # fmt: skip
    ready = ModelDeployment.objects.get(is_default=True)

    page = admin_client.post(
        "/admin/deployments/modeldeployment/",
        {"action": "materialize_and_verify", "_selected_action": [good.pk, bad.pk, ready.pk]},
        follow=True,
    )

    assert page.status_code == 200
    shown = [str(message) for message in page.context["messages"]]
    assert any(m.startswith("smol@v10: ready at") for m in shown)
    assert any(m.startswith("smol@v11 failed:") and "holds no weights" in m for m in shown)
    assert any(m.startswith(f"{ready.key}: skipped, it is ready") for m in shown)
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.status == DeploymentStatus.READY and good.checksum == default_checksum
    assert bad.status == DeploymentStatus.FAILED and "holds no weights" in bad.status_reason
    assert cache_entries(model_cache) == ["smol@v10"]


def test_weights_are_edited_from_the_changelist(admin_client: Client) -> None:
    other = add_version("v2", weight=0, worker=False)

    def save(weight: int) -> Any:
        """Posts the changelist's formset with ``other``'s weight set to ``weight``, the rest as they are."""
        rows = list(ModelDeployment.objects.order_by("name", "-created_at"))
        data = {"form-TOTAL_FORMS": str(len(rows)), "form-INITIAL_FORMS": str(len(rows)), "_save": "Save"}
        for i, row in enumerate(rows):
            data[f"form-{i}-id"] = str(row.pk)
            data[f"form-{i}-traffic_weight"] = str(weight if row.pk == other.pk else row.traffic_weight)
        return admin_client.post(f"/admin/deployments/modeldeployment/?name={other.name}", data)

    assert save(30).status_code == 302
    other.refresh_from_db()
    assert other.traffic_weight == 30
    assert save(101).status_code == 200  # the form shows the error; nothing saved
    other.refresh_from_db()
    assert other.traffic_weight == 30
