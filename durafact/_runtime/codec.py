"""Payloads encrypted at rest: an AES-256-GCM payload codec with key ids, and the data
converter every entry point uses (starter, worker, replayer, bench, tests), which also
keeps large payloads in external storage (durafact/_runtime/payloads.py).

Keys come from `DURAFACT_KEYS` (`ID=BASE64,ID=BASE64`, newest first) or from the file
`DURAFACT_KEYS_FILE` names (one `ID=BASE64` a line, newest first; `#` comments and
blank lines allowed); each key is 32 random bytes in base64 (`durafact key ID`
prints a new one). New payloads are encrypted with the newest key and carry its id in
their metadata (`encoding: binary/encrypted`, `encryption-key-id: ID`); a payload is
decrypted with the key its id names, so after a rotation (`k2=...,k1=...`) old
histories still read. A payload whose key is not configured, or that fails
authentication (a wrong key, altered bytes), raises PayloadDecryptError naming the key
id: never garbage.

Without keys nothing is encrypted and plain payloads read as before; an encrypted
payload then fails with PayloadDecryptError saying that no keys are configured.
With keys, failure messages and stack traces are encrypted too (the server keeps
`Encoded failure`), except a PayloadDecryptError's: it holds key ids only, and who
reads it (`status` with other keys than the worker's) needs them. Not encrypted:
search attributes (the server indexes them), workflow and activity ids, activity types
and task queues.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    PayloadConverter,
)

from durafact._runtime.payloads import PayloadStore, store_from_env
from durafact._runtime.settings import SettingsError

KEYS_ENV = "DURAFACT_KEYS"
KEYS_FILE_ENV = "DURAFACT_KEYS_FILE"
ENCODING = b"binary/encrypted"
KEY_ID_FIELD = "encryption-key-id"
KEY_SIZE = 32  # AES-256
NONCE_SIZE = 12
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class CodecConfigError(SettingsError):
    """A one-line reason the configured keys cannot be used."""


class PayloadDecryptError(ValueError):
    """A payload that cannot be decrypted with the configured keys; names its key id."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


@dataclass(frozen=True)
class Keyring:
    """Encryption keys by id, newest first: the first encrypts, any decrypts."""

    keys: tuple[tuple[str, bytes], ...]

    @property
    def newest(self) -> str:
        return self.keys[0][0]

    @property
    def ids(self) -> list[str]:
        return [key_id for key_id, _ in self.keys]

    def key(self, key_id: str) -> bytes | None:
        return next((key for kid, key in self.keys if kid == key_id), None)


def parse_keys(entries: Sequence[str], where: str) -> Keyring:
    """A keyring from `ID=BASE64` entries (newest first); CodecConfigError, naming
    `where` and the entry, when one is not a valid key."""
    keys: list[tuple[str, bytes]] = []
    for entry in entries:
        key_id, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or not key_id:
            raise CodecConfigError(f"{where}: {entry.strip()[:20]!r}... is not ID=BASE64")
        if not KEY_ID.fullmatch(key_id):
            raise CodecConfigError(
                f"{where}: key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-'"
            )
        if any(kid == key_id for kid, _ in keys):
            raise CodecConfigError(f"{where}: key id {key_id!r} is given twice")
        try:
            key = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise CodecConfigError(f"{where}: key {key_id!r} is not valid base64") from None
        if len(key) != KEY_SIZE:
            raise CodecConfigError(
                f"{where}: key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_SIZE} "
                f"(make one with: durafact key {key_id})"
            )
        keys.append((key_id, key))
    if not keys:
        raise CodecConfigError(f"{where}: no keys")
    return Keyring(tuple(keys))


def keys_from_env(env: Mapping[str, str] | None = None) -> Keyring | None:
    """The keyring `DURAFACT_KEYS` or `DURAFACT_KEYS_FILE` configures, or None;
    CodecConfigError with a one-line reason when the configuration is unusable."""
    env = os.environ if env is None else env
    inline, file = (env.get(KEYS_ENV) or "").strip(), (env.get(KEYS_FILE_ENV) or "").strip()
    if inline and file:
        raise CodecConfigError(f"set {KEYS_ENV} or {KEYS_FILE_ENV}, not both")
    if inline:
        return parse_keys([e for e in inline.split(",") if e.strip()], KEYS_ENV)
    if file:
        try:
            text = Path(file).read_text()
        except OSError as exc:
            raise CodecConfigError(f"{KEYS_FILE_ENV}={file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CodecConfigError(f"{KEYS_FILE_ENV}={file}: not a text file") from None
        lines = [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")]
        return parse_keys(lines, f"{KEYS_FILE_ENV}={file}")
    return None


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload (metadata and data), the key id
    bound as associated data; with no keyring, payloads pass through unchanged."""

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring
        self._ciphers = {kid: AESGCM(key) for kid, key in keyring.keys} if keyring else {}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        if self.keyring is None:
            return payload
        key_id = self.keyring.newest
        nonce = os.urandom(NONCE_SIZE)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_FIELD: key_id.encode()}, data=nonce + sealed
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_FIELD, b"").decode(errors="replace")
        if self.keyring is None:
            raise PayloadDecryptError(
                f"payload is encrypted with key {key_id!r}, but no keys are configured "
                f"(set {KEYS_ENV} or {KEYS_FILE_ENV})",
                key_id,
            )
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadDecryptError(
                f"payload is encrypted with key {key_id!r}, which is not configured "
                f"(configured: {', '.join(self.keyring.ids)}): add key {key_id!r} to "
                f"{KEYS_ENV} or {KEYS_FILE_ENV}",
                key_id,
            )
        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_SIZE], data[NONCE_SIZE:], key_id.encode())
        except (InvalidTag, ValueError):
            raise PayloadDecryptError(
                f"payload encrypted with key {key_id!r} fails authentication: the configured "
                f"key {key_id!r} is not the one it was encrypted with, or the payload was altered",
                key_id,
            ) from None
        return Payload.FromString(plain)


class FailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """Moves failure messages and stack traces into a payload the codec encrypts, except
    a PayloadDecryptError's: a process that cannot decrypt the run could not read which
    key is missing either."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        converter = PLAIN_FAILURES if isinstance(exception, PayloadDecryptError) else super()
        converter.to_failure(exception, payload_converter, failure)


PLAIN_FAILURES = DefaultFailureConverter()


def data_converter(env: Mapping[str, str] | None = None) -> DataConverter:
    """The pydantic data converter with the payload codec for the keys `env`
    configures (default: this process's environment) and the external storage of
    large payloads it configures (durafact/_runtime/payloads.py); CodecConfigError or
    PayloadConfigError when they are unusable. Every client, worker and replayer of
    durafact uses this."""
    return converter_for(keys_from_env(env), store_from_env(env))


def converter_for(
    keyring: Keyring | None, store: PayloadStore | None = None, *, explain: bool = False
) -> DataConverter:
    """The pydantic data converter with an EncryptionCodec for `keyring` and, with a
    `store`, payloads from its threshold kept there. The SDK encodes with the codec
    before it stores, so with keys only ciphertext leaves. With keys, failure messages
    and stack traces travel in an encrypted payload too (the server stores `Encoded
    failure`; clients with the keys, and the codec server, restore them).

    Without keys there is no codec, unless `explain`: then a keyless one that only says
    which key an encrypted payload needs (a command reading a run). A worker goes
    without it: the SDK looks up each payload's serialization context in the workflow
    sandbox for a codec, which doubled the worker's time per model call
    (bench/README.md, "Overhead per call")."""
    converter = dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(keyring) if keyring or explain else None,
        external_storage=store.storage() if store else None,
    )
    if keyring is None:
        return converter
    return dataclasses.replace(converter, failure_converter_class=FailureConverter)


def new_key(key_id: str) -> str:
    """A fresh `ID=BASE64` key entry."""
    if not KEY_ID.fullmatch(key_id):
        raise CodecConfigError(f"key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return f"{key_id}={base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


def encrypts(converter: DataConverter) -> bool:
    """Whether `converter` encrypts payloads: then the starter also asks the run for
    opaque activity ids (`OPAQUE_IDS_MEMO`), since ids are stored in plain text."""
    codec = converter.payload_codec
    return isinstance(codec, EncryptionCodec) and codec.keyring is not None
