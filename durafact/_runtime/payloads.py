"""Large payloads kept out of Temporal's history: the SDK's claim check
(`temporalio.converter.ExternalStorage`) with the driver `DURAFACT_PAYLOADS` names.

- `file:DIR` (the default: `payloads/` in durafact's state directory, `DURAFACT_HOME`): one
  file a payload, named by the SHA-256 of its bytes, so a retried upload writes the same
  file again and a reader checks what it read. Starter and worker must see the same
  directory: the embedded stack and the tests.
- `s3://BUCKET`: the SDK's S3 driver (`temporalio.contrib.aws.s3driver`) on aioboto3, with
  the usual `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`
  (or `AWS_DEFAULT_REGION`) and, for an S3-compatible server such as MinIO,
  `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`). The bucket must exist.

A payload of `DURAFACT_PAYLOAD_THRESHOLD` bytes or more (default 128 KiB) is stored there
and the history holds a reference (driver name and claim) instead. The SDK applies the
payload codec first, so with encryption keys (durafact/_runtime/codec.py) only ciphertext is stored.
Every client and worker of one namespace needs the same setting to read the others' payloads.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durafact._runtime.settings import SettingsError, state_home

PAYLOADS_ENV = "DURAFACT_PAYLOADS"
THRESHOLD_ENV = "DURAFACT_PAYLOAD_THRESHOLD"
# Well under the server's 512 KB warning and 2 MB refusal per payload, and low enough
# that a workflow task scheduling a few dozen activities at once stays under gRPC's 4 MB.
DEFAULT_THRESHOLD = 128 * 1024
# A higher threshold would let payloads close to Temporal's 2 MB refusal through inline.
MAX_THRESHOLD = 1024 * 1024
# What one stored payload may hold; the SDK's S3 driver has the same default.
MAX_PAYLOAD_BYTES = 50 * 1024 * 1024


class PayloadConfigError(SettingsError):
    """A one-line reason the payload storage settings cannot be used."""


@dataclass(frozen=True)
class PayloadStore:
    """Where large payloads go, `file:DIR` or `s3://BUCKET`, and from what size."""

    location: str
    """`file:/absolute/dir` or `s3://bucket`."""
    threshold: int
    s3_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """aioboto3 client options (credentials included) for `s3://`."""

    def describe(self) -> str:
        """For the worker's log: where, from what size (never a credential)."""
        endpoint = self.s3_options.get("endpoint_url")
        at = f" at {endpoint}" if endpoint and self.location.startswith("s3:") else ""
        return f"{self.location}{at} from {self.threshold:,} bytes"

    def storage(self) -> ExternalStorage:
        """The SDK's external storage with this store's driver."""
        scheme, _, where = self.location.partition(":")
        driver: StorageDriver
        if scheme == "file":
            driver = FileStorageDriver(Path(where))
        else:
            driver = S3StorageDriver(
                client=AioBoto3Client(self.s3_options),
                bucket=where.removeprefix("//"),
                max_payload_size=MAX_PAYLOAD_BYTES,
            )
        return ExternalStorage(drivers=[driver], payload_size_threshold=self.threshold)


def store_from_env(env: Mapping[str, str] | None = None) -> PayloadStore:
    """The store `DURAFACT_PAYLOADS` and `DURAFACT_PAYLOAD_THRESHOLD` configure;
    PayloadConfigError with a one-line reason when they are unusable."""
    env = os.environ if env is None else env
    given = (env.get(PAYLOADS_ENV) or "").strip() or f"file:{state_home(env) / 'payloads'}"
    if given.startswith("file:") and given[5:].strip():
        location = f"file:{Path(given[5:].strip()).expanduser().resolve()}"
    elif given.startswith("s3://"):
        bucket = given[5:].rstrip("/")
        if not bucket or "/" in bucket:
            raise PayloadConfigError(
                f"{PAYLOADS_ENV}={given}: give a bucket, s3://BUCKET (the SDK's keys "
                "already start v0/ns/NAMESPACE/...)"
            )
        location = f"s3://{bucket}"
    else:
        raise PayloadConfigError(f"{PAYLOADS_ENV}={given}: use file:DIR or s3://BUCKET")
    return PayloadStore(location, threshold_from_env(env), s3_client_options(env))


def threshold_from_env(env: Mapping[str, str]) -> int:
    given = (env.get(THRESHOLD_ENV) or "").strip().replace("_", "")
    if not given:
        return DEFAULT_THRESHOLD
    if not re.fullmatch(r"[0-9]+", given) or int(given) > MAX_THRESHOLD:
        raise PayloadConfigError(
            f"{THRESHOLD_ENV}={env[THRESHOLD_ENV]}: give a size in bytes from 0 to "
            f"{MAX_THRESHOLD:,} (Temporal refuses payloads over 2 MB)"
        )
    return int(given)


class FileStorageDriver(StorageDriver):
    """Payloads as files in one directory, named by the SHA-256 of their bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def name(self) -> str:
        return "durafact.file"

    def type(self) -> str:
        return "durafact.file"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(lambda: [self._write(p) for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._read(c) for c in claims])

    def _path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest

    def _write(self, payload: Payload) -> StorageDriverClaim:
        data = payload.SerializeToString()
        if len(data) > MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"a payload of {len(data):,} bytes is over the {MAX_PAYLOAD_BYTES:,} bytes "
                "one stored payload may hold"
            )
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():  # the same bytes are already there: nothing to write
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written aside, then renamed: a reader never sees half a payload.
            partial = path.with_name(f"{digest}.{os.getpid()}.{id(data)}.partial")
            partial.write_bytes(data)
            partial.replace(path)
        return StorageDriverClaim(claim_data={"sha256": digest})

    def _read(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data["sha256"]
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(self._missing(digest)) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"stored payload {path} does not match its SHA-256: it was altered")
        return Payload.FromString(data)

    def _missing(self, digest: str) -> str:
        """Why a stored payload is not where its claim says, and what to do."""
        if not self.directory.is_dir():
            return (
                f"stored payload {digest[:12]} cannot be read: the payload store "
                f"{self.directory} does not exist (deleted or moved? restore it; or set "
                f"{PAYLOADS_ENV} to the store the payload was written to)"
            )
        return (
            f"stored payload {digest[:12]} is not in {self.directory}: the process that "
            f"stored it used another {PAYLOADS_ENV} (starter and worker must share it)"
        )


def s3_client_options(env: Mapping[str, str]) -> dict[str, Any]:
    """aioboto3 client options from the AWS_* variables in `env` (unset: boto's own
    defaults, such as a profile or an instance role)."""
    options = {
        "endpoint_url": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "region_name": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": env.get("AWS_SESSION_TOKEN"),
    }
    return {name: value for name, value in options.items() if value}


class AioBoto3Client(S3StorageDriverClient):
    """The SDK's aioboto3 adapter on a client opened for each call: the converter is
    built before any event loop runs, and an aioboto3 client lives in one loop."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        import aioboto3  # only a process that stores in S3 pays for importing boto
        from botocore.config import Config

        self._session = aioboto3.Session()
        # MinIO and other S3-compatible servers answer on paths, not bucket host names.
        path_style = Config(s3={"addressing_style": "path"}) if "endpoint_url" in options else None
        self._options = {**options, "config": path_style} if path_style else dict(options)

    @asynccontextmanager
    async def _client(self) -> Any:
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

        async with self._session.client("s3", **self._options) as s3:
            yield new_aioboto3_client(s3)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        async with self._client() as client:
            return await client.object_exists(bucket=bucket, key=key)

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        async with self._client() as client:
            await client.put_object(bucket=bucket, key=key, data=data)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        async with self._client() as client:
            return await client.get_object(bucket=bucket, key=key)
