"""Named model and embedding endpoints: worker configuration, never workflow input.

A workflow names an endpoint (`SourceSpec.embedding_endpoint`); the worker knows
what the name means, a base URL and the key that URL receives. No workflow input
carries a URL that a credential is sent to, so whoever can start a workflow cannot
make the worker hand its keys to a server of their choosing.

    default          OPENAI_BASE_URL (empty: api.openai.com) with OPENAI_API_KEY
    NAME             DURAFACT_ENDPOINT_<NAME>=URL with DURAFACT_ENDPOINT_<NAME>_KEY=KEY
                     and DURAFACT_ENDPOINT_<NAME>_MODEL=MODEL (default: DURAFACT_MODEL)

`NAME` is the rest of the variable's name, lower-cased (`DURAFACT_ENDPOINT_EMBED`
is the endpoint `embed`); a variable ending in `_KEY` is always a key, one ending in
`_MODEL` the name of the chat model that endpoint serves (a fallback endpoint at
another provider names the same model differently). An endpoint without a key gets
none (keyless local servers); it never gets another endpoint's. Each mistake is one
line (`EndpointError`), raised when the worker starts. The worker's clients for them
are made where its activities are (durafact/_runtime/worker_kit.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import BaseModel, Field

from durafact._core.redaction import redact_url
from durafact._core.sources import DEFAULT_ENDPOINT

ENDPOINT_PREFIX = "DURAFACT_ENDPOINT_"
KEY_SUFFIX = "_KEY"
MODEL_SUFFIX = "_MODEL"
NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")


class EndpointError(ValueError):
    """A one-line reason the configured endpoints cannot be used."""


class Endpoint(BaseModel):
    """One OpenAI-compatible endpoint the worker may call, and the key it gets."""

    name: str
    base_url: str | None = Field(description="None: the openai client's own (api.openai.com).")
    api_key: str | None = Field(
        default=None, repr=False, exclude=True, description="None: no key sent."
    )
    model: str | None = Field(
        default=None, description="The chat model requested from it. None: the worker's."
    )
    origin: str = Field(default="", description="Where it was configured, for messages.")


def check_url(url: str, origin: str) -> str:
    """`url` when it is an http(s) URL with a host, else an EndpointError naming `origin`."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as exc:
        raise EndpointError(f"{origin}={redact_url(url)!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(
            f"{origin}={redact_url(url)!r}: expected an http:// or https:// URL with a host, "
            "such as http://127.0.0.1:8765/v1"
        )
    return url


def split_query(url: str | None) -> tuple[str | None, dict[str, str]]:
    """`url` without its query (nor fragment), and the query's parameters. The openai
    client appends a request's path to its base URL as text (`/v1?api_key=k` became
    `/v1/?api_key=kchat/completions`), so the query goes to it apart, as `default_query`,
    which it sends with every request."""
    if url is None:
        return None, {}
    parts = urlsplit(url)
    base = urlunsplit(parts._replace(query="", fragment=""))
    return base, dict(parse_qsl(parts.query, keep_blank_values=True))


def default_endpoint(base_url: str | None, api_key: str | None) -> Endpoint:
    """The endpoint `default`: OPENAI_BASE_URL and OPENAI_API_KEY, as the model uses them."""
    return Endpoint(
        name=DEFAULT_ENDPOINT, base_url=base_url, api_key=api_key, origin="OPENAI_BASE_URL"
    )


def named_endpoints(env: Mapping[str, str]) -> dict[str, Endpoint]:
    """The endpoints `DURAFACT_ENDPOINT_<NAME>` (and `_KEY`, `_MODEL`) variables of `env`
    name."""
    urls: dict[str, tuple[str, str]] = {}
    keys: dict[str, tuple[str, str]] = {}
    models: dict[str, tuple[str, str]] = {}
    for variable, value in sorted(env.items()):
        if not variable.upper().startswith(ENDPOINT_PREFIX) or not value:
            continue
        rest = variable[len(ENDPOINT_PREFIX) :]
        found, name = urls, rest
        for suffix, kind in ((KEY_SUFFIX, keys), (MODEL_SUFFIX, models)):
            if rest.upper().endswith(suffix):
                found, name = kind, rest[: -len(suffix)]
        name = name.lower()
        if not NAME.fullmatch(name):
            raise EndpointError(
                f"{variable}: {name!r} is not an endpoint name: letters, digits and '_', "
                "starting with a letter or digit"
            )
        if name == DEFAULT_ENDPOINT:
            raise EndpointError(
                f"{variable}: the endpoint 'default' is OPENAI_BASE_URL with OPENAI_API_KEY; "
                "give another endpoint another name"
            )
        found[name] = (variable, value.strip())
    for kind, why in (
        (keys, "a key is only ever sent to the URL configured beside it"),
        (models, "it names the model of the endpoint configured there"),
    ):
        for name, (variable, _) in kind.items():
            if name not in urls:
                raise EndpointError(
                    f"{variable} is set but {ENDPOINT_PREFIX}{name.upper()} (its URL) is not: "
                    + why
                )
    return {
        name: Endpoint(
            name=name,
            base_url=check_url(url, variable),
            api_key=keys[name][1] if name in keys else None,
            model=models[name][1] if name in models else None,
            origin=variable,
        )
        for name, (variable, url) in urls.items()
    }


def configured_endpoints(env: Mapping[str, str]) -> dict[str, Endpoint]:
    """Every endpoint `env` configures, `default` first; an EndpointError when one is wrong."""
    base_url = env.get("OPENAI_BASE_URL") or None
    if base_url:
        check_url(base_url, "OPENAI_BASE_URL")
    default = default_endpoint(base_url, env.get("OPENAI_API_KEY") or None)
    return {DEFAULT_ENDPOINT: default, **named_endpoints(env)}
