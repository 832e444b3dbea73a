"""The model store over the S3 API: a deployment's weights as the objects under ``s3://bucket/prefix/``.

A folder is stored as one object per file, keyed ``prefix + relative path`` (the ``.prepared`` marker is left out:
it says how a local copy was made, not what a worker loads). :func:`download_folder` writes them back into a
folder (a staging folder: ``deployments.model_files.write_staged``), :func:`upload_folder` publishes a folder.
Every failure of the store (unreachable, no such bucket, access denied, an empty prefix) is a
:class:`ModelStoreError` whose message says which store and what to fix; the client's timeouts and retries come
from ``MODEL_STORE_*`` (an unreachable store fails in seconds, not minutes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings

from core.config import ModelStoreConfig
from core.errors import DomainError
from deployments.model_files import READY_MARKER

S3_SCHEME = "s3://"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
"""S3's bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens, starting and ending alphanumeric."""
_UNSAFE_KEY = re.compile(r"[\x00-\x1f\x7f\\]")


class ModelStoreError(DomainError):
    """The store cannot be read or written as asked; the message names the store and what to fix."""

    code = "model_store_error"


@dataclass(frozen=True)
class StoreLocation:
    """``s3://bucket/prefix/``: a folder of the store (``prefix`` empty or ending with ``/``)."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class StoreObject:
    key: str
    relative: str
    """The file's path inside the folder (``key`` without the prefix)."""
    size: int


def parse_store_url(url: str) -> StoreLocation:
    """``s3://bucket/prefix/`` as a :class:`StoreLocation` (a missing trailing ``/`` is added);
    :class:`ModelStoreError` naming what is wrong with any other string."""
    shown = url[:200]
    if not url.startswith(S3_SCHEME):
        raise ModelStoreError(f"'{shown}' is not an s3:// URL: give s3://bucket/prefix/ (the folder of the model).")
    bucket, _, prefix = url[len(S3_SCHEME) :].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ModelStoreError(
            f"'{shown}': '{bucket[:70]}' is not a valid bucket name (3-63 lowercase letters, digits, '.' and '-')."
        )
    if _UNSAFE_KEY.search(prefix) or prefix.strip() != prefix:
        raise ModelStoreError(f"'{shown}': the prefix holds control characters, backslashes or surrounding spaces.")
    parts = prefix.rstrip("/").split("/") if prefix.rstrip("/") else []
    if any(part in ("", ".", "..") for part in parts):
        raise ModelStoreError(f"'{shown}': the prefix may not hold empty, '.' or '..' segments.")
    if len(prefix) > 900:
        raise ModelStoreError(f"'{shown}...': the prefix is longer than 900 characters.")
    return StoreLocation(bucket=bucket, prefix="/".join(parts) + "/" if parts else "")


def store_client(config: ModelStoreConfig | None = None) -> Any:
    """A boto3 S3 client for ``MODEL_STORE_*`` (boto3 is imported on use: only hosts that touch the store need it)."""
    import boto3
    from botocore.config import Config

    config = config or settings.MODEL_STORE
    options: dict[str, Any] = {
        "config": Config(
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            retries={"max_attempts": max(1, config.max_attempts), "mode": "standard"},
        )
    }
    if config.endpoint_url:
        options["endpoint_url"] = config.endpoint_url
    if config.region:
        options["region_name"] = config.region
    if config.access_key_id:
        options["aws_access_key_id"] = config.access_key_id
        options["aws_secret_access_key"] = config.secret_access_key
    return boto3.client("s3", **options)


def transfer_config(config: ModelStoreConfig | None = None) -> Any:
    """boto3's managed-transfer settings: parts of ``MODEL_STORE_TRANSFER_CHUNK_MB`` for the larger files."""
    from boto3.s3.transfer import TransferConfig

    chunk = max(5, (config or settings.MODEL_STORE).transfer_chunk_mb) * (1 << 20)  # S3's smallest part: 5 MiB
    return TransferConfig(multipart_threshold=chunk, multipart_chunksize=chunk)


def describe_store(config: ModelStoreConfig | None = None) -> str:
    config = config or settings.MODEL_STORE
    return config.endpoint_url or "AWS S3"


def store_error(exc: Exception, location: StoreLocation, *, doing: str) -> ModelStoreError:
    """``exc`` (boto3's, or an OS error while writing the files) as a :class:`ModelStoreError` saying what to fix."""
    from botocore.exceptions import ClientError, HTTPClientError, NoCredentialsError, PartialCredentialsError
    from botocore.exceptions import ConnectionError as StoreConnectionError

    where = f"{location.url} at {describe_store()}"
    if isinstance(exc, ModelStoreError):
        return exc
    if isinstance(exc, StoreConnectionError | HTTPClientError):
        return ModelStoreError(
            f"the model store is unreachable while {doing} {where} ({exc}): check MODEL_STORE_ENDPOINT_URL and "
            "the network."
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ModelStoreError(
            f"no credentials for the model store while {doing} {where}: set MODEL_STORE_ACCESS_KEY_ID and "
            "MODEL_STORE_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)."
        )
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code == "NoSuchBucket":
            return ModelStoreError(f"the bucket '{location.bucket}' does not exist ({where}).")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return ModelStoreError(
                f"the model store refused access while {doing} {where} ({code}): check the credentials "
                "(MODEL_STORE_ACCESS_KEY_ID, MODEL_STORE_SECRET_ACCESS_KEY) and the bucket's policy."
            )
        return ModelStoreError(f"the model store answered {code or 'an error'} while {doing} {where}: {exc}")
    if isinstance(exc, OSError):
        return ModelStoreError(f"writing the files failed while {doing} {where}: {exc}")
    return ModelStoreError(f"{doing} {where} failed ({exc.__class__.__name__}: {exc})")


def list_folder(client: Any, location: StoreLocation) -> list[StoreObject]:
    """The files of the folder at ``location``, by path; :class:`ModelStoreError` when there are none."""
    found = _list_objects(client, location)
    if not found:
        raise ModelStoreError(
            f"{location.url} holds no files at {describe_store()}: publish the model there first "
            "(manage.py model_store_push FOLDER URL)."
        )
    return found


def _list_objects(client: Any, location: StoreLocation) -> list[StoreObject]:
    """The files under ``location`` (none: empty); :class:`ModelStoreError` when a key would land outside the
    folder (``..``, an absolute path) or the store fails."""
    found: list[StoreObject] = []
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=location.prefix)
        for page in pages:
            for item in page.get("Contents", []):
                key = str(item["Key"])
                relative = key[len(location.prefix) :]
                if not relative or relative.endswith("/"):
                    continue  # a "folder" marker some tools write
                parts = PurePosixPath(relative).parts
                if relative.startswith("/") or ".." in parts or _UNSAFE_KEY.search(relative):
                    raise ModelStoreError(f"{location.url} holds an unsafe key: {key[:200]!r}.")
                if parts[-1] == READY_MARKER:
                    continue
                found.append(StoreObject(key=key, relative=relative, size=int(item.get("Size", 0))))
    except Exception as exc:  # botocore raises many kinds: each becomes a ModelStoreError saying what to fix
        raise store_error(exc, location, doing="listing") from exc
    return sorted(found, key=lambda obj: obj.relative)


ProgressCallback = Callable[[int, int], None]
"""Called with (files done, bytes done) as a transfer goes on."""


def download_folder(
    client: Any, location: StoreLocation, objects: list[StoreObject], folder: Path, *, progress: ProgressCallback
) -> None:
    """Writes ``objects`` (from :func:`list_folder`) under ``folder``, calling ``progress`` as bytes arrive."""
    done_files = 0
    done_bytes = 0
    transfer = transfer_config()

    def on_bytes(count: int) -> None:
        nonlocal done_bytes
        done_bytes += count
        progress(done_files, done_bytes)

    try:
        for obj in objects:
            target = folder / obj.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(location.bucket, obj.key, str(target), Callback=on_bytes, Config=transfer)
            done_files += 1
            progress(done_files, done_bytes)
    except Exception as exc:  # as in list_folder
        raise store_error(exc, location, doing="downloading") from exc


def ensure_bucket(client: Any, location: StoreLocation) -> bool:
    """Creates ``location``'s bucket when it does not exist (True when it did so)."""
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=location.bucket)
        return False
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code", "")) not in ("404", "NoSuchBucket", "NotFound"):
            raise store_error(exc, location, doing="checking the bucket of") from exc
    except Exception as exc:  # as in list_folder
        raise store_error(exc, location, doing="checking the bucket of") from exc
    try:
        client.create_bucket(Bucket=location.bucket)
    except Exception as exc:  # as in list_folder
        raise store_error(exc, location, doing="creating the bucket of") from exc
    return True


def folder_files(folder: Path) -> list[tuple[str, Path]]:
    """``(relative path, path)`` of the files a worker loads from ``folder`` (not the ``.prepared`` marker)."""
    return sorted(
        (path.relative_to(folder).as_posix(), path)
        for path in folder.rglob("*")
        if path.is_file() and path.name != READY_MARKER
    )


def upload_folder(client: Any, folder: Path, location: StoreLocation, *, replace: bool = False) -> tuple[int, int]:
    """Publishes ``folder``'s files under ``location``; ``(files, bytes)`` uploaded. A prefix that already holds
    files is refused unless ``replace`` (they are deleted first: a store folder holds exactly one model)."""
    existing = _list_objects(client, location)
    if existing and not replace:
        raise ModelStoreError(
            f"{location.url} already holds {len(existing)} files: publish to a new prefix (one per version), or "
            "pass --replace to overwrite it (the deployments registered from it then fail their checksum)."
        )
    files = folder_files(folder)
    transfer = transfer_config()
    try:
        for obj in existing:
            client.delete_object(Bucket=location.bucket, Key=obj.key)
        for relative, path in files:
            client.upload_file(str(path), location.bucket, location.prefix + relative, Config=transfer)
    except Exception as exc:  # as in list_folder
        raise store_error(exc, location, doing="uploading to") from exc
    return len(files), sum(path.stat().st_size for _, path in files)
