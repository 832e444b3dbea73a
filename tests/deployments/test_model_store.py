"""The model store over the S3 API and per-host model caches, against a real S3 API server (moto's, on loopback).

The packaged SmolLM2 folder is published to the store (``model_store_push``), registered from it as an ``s3``
version (downloaded, verified, checksummed), then filled into an empty per-host cache as a worker host does: the
copy in place has the recorded checksum. A tampered object in the store, or a store that does not answer, leaves
no copy in place and a ``failed`` report with the reason; a worker process refuses to start (exits non-zero) and
never consumes. Small folders stand in for the model where only the bytes matter (a fill checks the checksum, not
the model), so most tests move kilobytes, not half a gigabyte.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import boto3
import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client
from moto.server import ThreadedMotoServer
from pytest_django.fixtures import Settings

from bench.lib.processes import celery_worker_argv, child_env, stop_process_group, wait_worker_heartbeat
from deployments.host_cache import (
    HostCacheError,
    HostCacheState,
    Reporter,
    fill_from_store,
    host_cache_statuses,
    recorded_checksum,
)
from deployments.model_files import READY_MARKER, is_prepared
from deployments.model_store import ModelStoreError, ensure_bucket, list_folder, parse_store_url, store_client
from deployments.models import DeploymentStatus, ModelDeployment, SourceKind
from deployments.registration import RegistrationError, folder_checksum, register_deployment
from generation.worker_contract import WorkerState, worker_heartbeats
from inference_workers.deployment import DeploymentNotServable, find_worker_deployment, worker_deployment
from inference_workers.signals import WORKER_REFUSED_EXIT_CODE

pytestmark = pytest.mark.django_db

REAL_DEFAULT_DIR: Path = django_settings.ENGINE.default_model_dir
NAME = django_settings.ENGINE.served_model_name
BUCKET = "models"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API server (moto's server mode) on a free loopback port, with an empty bucket ``models``."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture
def s3(s3_endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=s3_endpoint, **CREDENTIALS)


def store_config(endpoint: str) -> Any:
    return dataclasses.replace(
        django_settings.MODEL_STORE,
        endpoint_url=endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        connect_timeout_s=1.0,
        read_timeout_s=10.0,
        max_attempts=1,
        progress_interval_s=0.0,
        transfer_chunk_mb=1024,  # one GET per file: moto answers ranged GETs slowly
    )


@pytest.fixture
def store(settings: Settings, s3_endpoint: str) -> str:
    settings.MODEL_STORE = store_config(s3_endpoint)
    return s3_endpoint


@pytest.fixture
def registry_cache(settings: Settings, tmp_path: Path) -> Iterator[Path]:
    """The registering host's model cache (its default model a link to the real prepared folder)."""
    cache = tmp_path / "registry-cache"
    cache.mkdir()
    (cache / REAL_DEFAULT_DIR.name).symlink_to(REAL_DEFAULT_DIR, target_is_directory=True)
    settings.ENGINE = dataclasses.replace(settings.ENGINE, model_cache_dir=cache)
    yield cache
    shutil.rmtree(cache, ignore_errors=True)


def per_host(settings: Settings, cache: Path) -> Path:
    """This test's worker host: its own, empty cache (``MODEL_CACHE_MODE=per_host``)."""
    cache.mkdir(parents=True, exist_ok=True)
    settings.ENGINE = dataclasses.replace(settings.ENGINE, model_cache_dir=cache)
    settings.MODEL_STORE = dataclasses.replace(settings.MODEL_STORE, cache_mode="per_host")
    worker_deployment.cache_clear()
    return cache


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def small_folder(root: Path, text: str = "weights") -> Path:
    """A folder standing in for a model where only its bytes matter (a fill checks the checksum, not the model)."""
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["X"]}')
    (root / "model.safetensors").write_bytes(text.encode() * 1000)
    (root / "sub" / "extra.txt").write_text("nested files keep their path")
    return root


def publish_small(s3: Any, prefix: str, folder: Path) -> str:
    for path in folder.rglob("*"):
        if path.is_file():
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}{path.relative_to(folder).as_posix()}", Body=path.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


def s3_row(version: str, url: str, checksum: str) -> ModelDeployment:
    """A ready ``s3`` deployment as registration leaves it (registered on another host: its local_path is there)."""
    return ModelDeployment.objects.create(
        name="tiny",
        version=version,
        source_kind=SourceKind.S3,
        source_path=url,
        local_path=f"/registry-host/cache/tiny@{version}",
        checksum=checksum,
        status=DeploymentStatus.READY,
    )


def cache_entries(cache: Path) -> list[str]:
    return sorted(entry.name for entry in cache.iterdir() if not entry.name.endswith(".lock"))


def reports(key: str) -> dict[str, Any]:
    return {status.worker: status for status in host_cache_statuses([key])[key]}


# --- URLs ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://models/smollm2/v2/", "models", "smollm2/v2/"),
        ("s3://models/smollm2/v2", "models", "smollm2/v2/"),
        ("s3://my.bucket-1", "my.bucket-1", ""),
    ],
)
def test_a_store_url_names_a_bucket_and_a_folder(url: str, bucket: str, prefix: str) -> None:
    location = parse_store_url(url)
    assert (location.bucket, location.prefix) == (bucket, prefix)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://models/x/", "not an s3:// URL"),
        ("s3://", "not a valid bucket name"),
        ("s3://Models/x/", "not a valid bucket name"),
        ("s3://ab/x/", "not a valid bucket name"),
        ("s3://models/a/../b/", "'..' segments"),
        ("s3://models/a//b/", "empty"),
        ("s3://models/a\\b/", "backslashes"),
    ],
)
def test_a_bad_store_url_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ModelStoreError, match=re.escape(says)):
        parse_store_url(url)


def test_a_bad_s3_source_is_a_registration_error_nothing_written(admin_client: Client) -> None:
    before = ModelDeployment.objects.count()
    with pytest.raises(RegistrationError, match="not a valid bucket name"):
        register_deployment(name="smol", version="v9", source_kind=SourceKind.S3, source_path="s3://Bad_Bucket/x/")
    with pytest.raises(RegistrationError, match="use source_kind s3"):
        register_deployment(name="smol", version="v9", source_kind=SourceKind.HF_FOLDER, source_path="s3://models/x/")
    with pytest.raises(CommandError, match=re.escape("'..' segments")):
        call_command("deployment_register", "smol", "v9", "--source", "s3://models/../x/", stdout=StringIO())

    page = admin_client.post(
        "/admin/deployments/modeldeployment/add/",
        {
            "name": "smol",
            "version": "v9",
            "source_kind": "s3",
            "source_path": "s3://no_such_bucket!/x/",
            "engine_args": "{}",
            "traffic_weight": "0",
            "cost_per_million_input_tokens": "0",
            "cost_per_million_output_tokens": "0",
        },
    )
    assert page.status_code == 200  # the form again, with the error: not a 500, nothing saved
    assert "not a valid bucket name" in page.content.decode()
    assert ModelDeployment.objects.count() == before


# --- the packaged model through the store ------------------------------------------------------------------------


def test_a_registered_s3_version_is_filled_into_an_empty_per_host_cache_and_a_tampered_copy_is_refused(
    settings: Settings, store: str, s3: Any, registry_cache: Path, tmp_path: Path
) -> None:
    assert is_prepared(REAL_DEFAULT_DIR), "run `manage.py prepare_model` before the tests"
    expected = folder_checksum(REAL_DEFAULT_DIR)
    url = f"s3://{BUCKET}/smollm2/v2/"

    out = StringIO()
    call_command("model_store_push", str(REAL_DEFAULT_DIR), url, stdout=out)
    assert f"sha256: {expected}" in out.getvalue()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="smollm2/v2/")["Contents"])
    assert f"smollm2/v2/{READY_MARKER}" not in keys and "smollm2/v2/model.safetensors" in keys
    with pytest.raises(CommandError, match="already holds"):  # one model per prefix, unless --replace
        call_command("model_store_push", str(REAL_DEFAULT_DIR), url, stdout=StringIO())
    with pytest.raises(CommandError, match="the bucket 'no-such-bucket' does not exist"):
        call_command("model_store_push", str(REAL_DEFAULT_DIR), "s3://no-such-bucket/x/", stdout=StringIO())

    row = register_deployment(name=NAME, version="v2", source_kind=SourceKind.S3, source_path=url.rstrip("/"))
    assert (row.status, row.checksum, row.source_path) == (DeploymentStatus.READY, expected, url)
    assert row.local_path == str(registry_cache / f"{NAME}@v2")
    assert recorded_checksum(Path(row.local_path)) == expected  # the registering host's copy counts as filled
    assert cache_entries(registry_cache) == [REAL_DEFAULT_DIR.name, f"{NAME}@v2"]  # no staging folder left

    host_cache = per_host(settings, tmp_path / "gpu-host-b")
    served = find_worker_deployment(f"{NAME}@v2", worker="gpu-b@host-b")
    assert served.local_path == str(host_cache / f"{NAME}@v2")
    assert folder_checksum(Path(served.local_path)) == expected
    assert recorded_checksum(Path(served.local_path)) == expected
    assert cache_entries(host_cache) == [f"{NAME}@v2"]
    report = reports(row.key)["gpu-b@host-b"]
    assert (report.state, report.path) == (HostCacheState.READY, served.local_path)

    # Tamper with one object in the store: a host with an empty cache refuses it, and keeps nothing.
    s3.put_object(Bucket=BUCKET, Key="smollm2/v2/config.json", Body=b'{"architectures": ["Evil"]}')
    other_host = per_host(settings, tmp_path / "gpu-host-c")
    with pytest.raises(DeploymentNotServable, match="checksum mismatch"):
        find_worker_deployment(f"{NAME}@v2", worker="gpu-c@host-c")
    assert cache_entries(other_host) == []
    failed = reports(row.key)["gpu-c@host-c"]
    assert failed.state == HostCacheState.FAILED and "checksum mismatch" in failed.reason
    shutil.rmtree(tmp_path / "gpu-host-b")


# --- fills, with small folders ------------------------------------------------------------------------------------


def test_a_fill_reports_its_progress_and_a_verified_copy_is_not_downloaded_again(
    settings: Settings, store: str, s3: Any, tmp_path: Path
) -> None:
    folder = small_folder(tmp_path / "src")
    row = s3_row("v1", publish_small(s3, "tiny/v1/", folder), folder_checksum(folder))
    cache = per_host(settings, tmp_path / "host")
    progress: list[tuple[int, int, int, int]] = []

    class Recording(Reporter):
        def progress(self, *, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
            progress.append((files_done, files_total, bytes_done, bytes_total))
            super().progress(
                files_done=files_done, files_total=files_total, bytes_done=bytes_done, bytes_total=bytes_total
            )

    fill_from_store(
        key=row.key,
        source_path=row.source_path,
        checksum=row.checksum,
        target=cache / row.key,
        reporter=Recording(key=row.key, worker="w1"),
    )
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert progress[0] == (0, 3, 0, total) and progress[-1] == (3, 3, total, total)
    assert [p[0] for p in progress] == sorted(p[0] for p in progress)  # files done only go up
    assert (cache / row.key / "sub" / "extra.txt").read_text() == "nested files keep their path"

    # The store goes away: a verified copy in place is served as it is (its marker records the checksum).
    settings.MODEL_STORE = dataclasses.replace(settings.MODEL_STORE, endpoint_url=f"http://127.0.0.1:{closed_port()}")
    assert find_worker_deployment(row.key, worker="w1").local_path == str(cache / row.key)
    assert reports(row.key)["w1"].state == HostCacheState.READY


def test_an_unverified_copy_in_place_is_replaced_by_a_verified_one(
    settings: Settings, store: str, s3: Any, tmp_path: Path
) -> None:
    folder = small_folder(tmp_path / "src")
    row = s3_row("v2", publish_small(s3, "tiny/v2/", folder), folder_checksum(folder))
    cache = per_host(settings, tmp_path / "host")
    stale = small_folder(cache / row.key, text="other weights")  # no marker: not a verified copy
    (stale / READY_MARKER).write_text("sha256=" + "0" * 64 + "\n")

    served = find_worker_deployment(row.key, worker="w1")

    assert folder_checksum(Path(served.local_path)) == row.checksum
    assert recorded_checksum(Path(served.local_path)) == row.checksum


def test_an_unreachable_store_is_a_clear_failure_and_leaves_nothing(
    settings: Settings, store: str, s3: Any, tmp_path: Path
) -> None:
    folder = small_folder(tmp_path / "src")
    row = s3_row("v3", publish_small(s3, "tiny/v3/", folder), folder_checksum(folder))
    cache = per_host(settings, tmp_path / "host")
    settings.MODEL_STORE = dataclasses.replace(settings.MODEL_STORE, endpoint_url=f"http://127.0.0.1:{closed_port()}")

    with pytest.raises(DeploymentNotServable, match="model store is unreachable") as refused:
        find_worker_deployment(row.key, worker="w1")

    assert "MODEL_STORE_ENDPOINT_URL" in str(refused.value)
    assert cache_entries(cache) == []
    failed = reports(row.key)["w1"]
    assert failed.state == HostCacheState.FAILED and "unreachable" in failed.reason


@pytest.mark.parametrize(
    ("prefix", "says"),
    [("tiny/nothing-here/", "holds no files"), ("tiny/v4/", "checksum mismatch")],
)
def test_an_empty_or_changed_store_folder_is_refused(
    settings: Settings, store: str, s3: Any, tmp_path: Path, prefix: str, says: str
) -> None:
    folder = small_folder(tmp_path / "src")
    publish_small(s3, "tiny/v4/", small_folder(tmp_path / "changed", text="changed"))
    cache = per_host(settings, tmp_path / "host")
    with pytest.raises(HostCacheError, match=says):
        fill_from_store(
            key="tiny@v4",
            source_path=f"s3://{BUCKET}/{prefix}",
            checksum=folder_checksum(folder),
            target=cache / "tiny@v4",
            reporter=Reporter(key="tiny@v4", worker="w1"),
        )
    assert cache_entries(cache) == []


def test_a_per_host_worker_without_a_copy_of_a_folder_source_says_what_to_do(
    settings: Settings, tmp_path: Path
) -> None:
    row = ModelDeployment.objects.create(
        name="smol",
        version="v7",
        source_kind=SourceKind.HF_FOLDER,
        source_path="/data/smol",
        local_path="/registry-host/cache/smol@v7",
        checksum="a" * 64,
        status=DeploymentStatus.READY,
    )
    per_host(settings, tmp_path / "host")
    with pytest.raises(DeploymentNotServable, match="no copy on this host") as refused:
        find_worker_deployment(row.key, worker="w1")
    assert "model_store_push" in str(refused.value)
    assert reports(row.key)["w1"].state == HostCacheState.FAILED

    served_in_place = ModelDeployment.objects.create(
        name="smol", version="v8", source_kind=SourceKind.PATH, source_path="/mnt/shared/smol",
        local_path="/mnt/shared/smol", checksum="a" * 64, status=DeploymentStatus.READY,
    )  # fmt: skip
    with pytest.raises(DeploymentNotServable, match="mount it on this host"):
        find_worker_deployment(served_in_place.key, worker="w1")
    by_name = ModelDeployment.objects.create(
        name="smol", version="v9", source_kind=SourceKind.PATH, source_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        local_path="HuggingFaceTB/SmolLM2-135M-Instruct", status=DeploymentStatus.READY,
    )  # fmt: skip
    assert find_worker_deployment(by_name.key).local_path == by_name.local_path  # a name vLLM resolves on the host


def test_shared_mode_serves_the_registered_copy_as_it_is(settings: Settings, tmp_path: Path) -> None:
    row = s3_row("v8", f"s3://{BUCKET}/tiny/v8/", "b" * 64)
    assert find_worker_deployment(row.key).local_path == row.local_path  # no store read, no copy: today's behaviour


def test_the_admin_shows_each_workers_cache_report(admin_client: Client, settings: Settings, tmp_path: Path) -> None:
    row = s3_row("v9", f"s3://{BUCKET}/tiny/v9/", "c" * 64)
    Reporter(key=row.key, worker="gpu-a@h1").progress(
        files_done=1, files_total=3, bytes_done=3 << 20, bytes_total=6 << 20
    )
    Reporter(key=row.key, worker="gpu-b@h2").failed("tiny@v9: checksum mismatch: ...")

    page = admin_client.get("/admin/deployments/modeldeployment/")

    html = page.content.decode()
    assert "gpu-a@h1: filling 1/3 files, 3.0/6.0 MB" in html
    assert "gpu-b@h2: failed: tiny@v9: checksum mismatch" in html
    detail = admin_client.get(f"/admin/deployments/modeldeployment/{row.pk}/change/").content.decode()
    assert "gpu-b@h2: failed" in detail


# --- a worker process ---------------------------------------------------------------------------------------------


def worker_env(endpoint: str, key: str, cache: Path, *, broker_prefix: str) -> dict[str, str]:
    """What a worker host with its own cache needs besides the database, Redis and the broker: env vars only."""
    return child_env(
        ENGINE_BACKEND="simulated",
        WORKER_DEPLOYMENT=key,
        MODEL_CACHE_MODE="per_host",
        MODEL_CACHE_DIR=str(cache),
        MODEL_STORE_ENDPOINT_URL=endpoint,
        MODEL_STORE_ACCESS_KEY_ID="testing",
        MODEL_STORE_SECRET_ACCESS_KEY="testing",
        MODEL_STORE_REGION="us-east-1",
        MODEL_STORE_MAX_ATTEMPTS="1",
        MODEL_STORE_TRANSFER_CHUNK_MB="1024",
        CELERY_BROKER_KEY_PREFIX=broker_prefix,
    )


def tokenizer_folder(root: Path) -> Path:
    """The real model's config, tokenizer and chat template with stand-in weights: what a worker on the simulated
    engine loads (its tokenizer renders the prompts; the simulated engine reads no weights)."""
    root.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (REAL_DEFAULT_DIR / name).is_file():
            shutil.copy2(REAL_DEFAULT_DIR / name, root / name)
    (root / "model.safetensors").write_bytes(b"stand-in weights" * 1000)
    return root


@pytest.mark.django_db(transaction=True)
def test_a_worker_host_with_an_empty_cache_fills_it_from_the_store_then_serves(
    s3_endpoint: str, s3: Any, tmp_path: Path
) -> None:
    folder = tokenizer_folder(tmp_path / "src")
    row = s3_row("v12", publish_small(s3, "tiny/v12/", folder), folder_checksum(folder))
    cache = tmp_path / "worker-host"
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            celery_worker_argv(name="gpu-s@host-s", concurrency=1),
            env=worker_env(s3_endpoint, row.key, cache, broker_prefix=f"s3store-{row.pk}:"),
            cwd=django_settings.BASE_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_worker_heartbeat("gpu-s@host-s", worker, timeout_s=240, what=f"the worker (log: {log_path})")
        beat = next(b for b in worker_heartbeats() if b.worker == "gpu-s@host-s")
        assert (beat.deployment, beat.state) == (row.key, WorkerState.READY)
    finally:
        stop_process_group(worker)
    text = log_path.read_text(errors="replace")
    assert f"model cache {row.key}: filling {cache / row.key} from s3://{BUCKET}/tiny/v12/" in text
    files = len(list(folder.iterdir()))
    assert f"model cache {row.key}: filling, 0/{files} files" in text  # progress, from the first file to the last
    assert f"model cache {row.key}: filling, {files}/{files} files" in text
    assert "filled and verified" in text
    assert f"this worker serves deployment {row.key} from {cache / row.key}" in text
    assert folder_checksum(cache / row.key) == row.checksum == recorded_checksum(cache / row.key)
    ready = reports(row.key)["gpu-s@host-s"]
    assert (ready.state, ready.path) == (HostCacheState.READY, str(cache / row.key))


@pytest.mark.django_db(transaction=True)
def test_a_worker_process_with_a_tampered_store_exits_without_consuming(
    s3_endpoint: str, s3: Any, tmp_path: Path
) -> None:
    folder = small_folder(tmp_path / "src")
    row = s3_row("v10", publish_small(s3, "tiny/v10/", folder), folder_checksum(folder))
    s3.put_object(Bucket=BUCKET, Key="tiny/v10/model.safetensors", Body=b"tampered")
    cache = tmp_path / "worker-host"
    worker = subprocess.run(
        celery_worker_argv(name="gpu-t@host-t", concurrency=1),
        env=worker_env(s3_endpoint, row.key, cache, broker_prefix=f"s3store-{row.pk}:"),
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    log = worker.stdout + worker.stderr
    assert worker.returncode == WORKER_REFUSED_EXIT_CODE, log[-3000:]
    assert "refuses to serve" in log and "checksum mismatch" in log
    assert "Connected to" not in log and "ready." not in log  # it never reached its consumer
    assert not (cache / row.key).exists()
    assert not any(b.worker == "gpu-t@host-t" for b in worker_heartbeats())
    failed = reports(row.key)["gpu-t@host-t"]
    assert failed.state == HostCacheState.FAILED and "checksum mismatch" in failed.reason


def test_model_cache_fill_fills_this_hosts_copy_or_exits_with_the_reason(
    settings: Settings, store: str, s3: Any, tmp_path: Path
) -> None:
    folder = small_folder(tmp_path / "src")
    row = s3_row("v11", publish_small(s3, "tiny/v11/", folder), folder_checksum(folder))
    cache = per_host(settings, tmp_path / "host")
    out = StringIO()
    call_command("model_cache_fill", row.key, "--worker", "warm@host", stdout=out)
    assert out.getvalue().strip() == f"{row.key}: {cache / row.key} (per_host cache)"
    assert recorded_checksum(cache / row.key) == row.checksum

    ModelDeployment.objects.filter(pk=row.pk).update(checksum="d" * 64)  # the recorded checksum no longer matches
    with pytest.raises(CommandError, match="checksum mismatch"):
        call_command("model_cache_fill", row.key, "--worker", "warm@host", stdout=StringIO())
    assert cache_entries(cache) == []  # the copy that no longer matches is gone, and nothing replaced it


def test_a_missing_bucket_is_created_on_request_only(store: str, s3: Any) -> None:
    location = parse_store_url("s3://fresh-bucket/tiny/")
    client = store_client()
    with pytest.raises(ModelStoreError, match="the bucket 'fresh-bucket' does not exist"):
        list_folder(client, location)
    assert ensure_bucket(client, location) is True
    assert ensure_bucket(client, location) is False
    assert "fresh-bucket" in [bucket["Name"] for bucket in s3.list_buckets()["Buckets"]]
