"""Settings read from the environment, with the defaults the whole project shares.

Where Temporal lives comes from `temporalio.envconfig`, as for every Temporal tool:
`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_GRPC_META_*`, and a profile (`TEMPORAL_PROFILE`, default `default`) of a
`temporal.toml` file (`TEMPORAL_CONFIG_FILE`, default
`~/.config/temporalio/temporal.toml`); variables override the profile. Everything
else is durafact's own: `DURAFACT_TASK_QUEUE`, `DURAFACT_MODEL`, `DURAFACT_UI_URL`,
`OPENAI_BASE_URL`, `OPENAI_API_KEY` (the endpoint `default`), and the named endpoints
`DURAFACT_ENDPOINT_<NAME>=URL` with `DURAFACT_ENDPOINT_<NAME>_KEY` (durafact/_runtime/endpoints.py).

The embedded stack's ports (`DURAFACT_TEMPORAL_PORT`, `DURAFACT_UI_PORT`,
`DURAFACT_MODEL_PORT`) are its defaults everywhere: with no address configured, every
command and `durafact-worker` connect to `localhost:$DURAFACT_TEMPORAL_PORT`. Web UI links
go to `DURAFACT_UI_URL`, else to the UI of the stack whose server the address names
(the port it was started with: durafact/_runtime/stack.py), else to
`http://localhost:$DURAFACT_UI_PORT`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, InstanceOf
from temporalio.envconfig import ClientConfigProfile

from durafact._core.sources import DEFAULT_ENDPOINT
from durafact._runtime import stack
from durafact._runtime.endpoints import (
    Endpoint,
    EndpointError,
    configured_endpoints,
    default_endpoint,
)

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_UI_URL = "http://localhost:8233"
TEMPORAL_PORT_ENV = "DURAFACT_TEMPORAL_PORT"
UI_PORT_ENV = "DURAFACT_UI_PORT"
MODEL_PORT_ENV = "DURAFACT_MODEL_PORT"
DEFAULT_PORTS = {TEMPORAL_PORT_ENV: 7233, UI_PORT_ENV: 8233, MODEL_PORT_ENV: 8765}
CLOUD_UI_URL = "https://cloud.temporal.io"
CLOUD_HOSTS = (".tmprl.cloud", ".api.temporal.io")


HOME_ENV = "DURAFACT_HOME"


def state_home(env: Mapping[str, str] | None = None) -> Path:
    """Where durafact keeps its state on this machine, whatever the working directory:
    the embedded stack (its database, logs, pid files) and the default payload store.
    `DURAFACT_HOME` when set, else `$XDG_STATE_HOME/durafact`, by default
    `~/.local/state/durafact`."""
    env = os.environ if env is None else env
    if env.get(HOME_ENV):
        return Path(env[HOME_ENV]).expanduser().resolve()
    xdg = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(xdg).expanduser().resolve() / "durafact"


class SettingsError(RuntimeError):
    """A one-line reason the configured settings cannot be used: a bad profile here;
    an unreachable server (durafact/_runtime/connection.py) or an unready namespace
    (durafact/_runtime/search_attributes.py)."""


def env_port(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    """The port variable `name` (default: `default`, else its DEFAULT_PORTS entry), or a
    SettingsError naming it."""
    value = env.get(name)
    if not value:
        return DEFAULT_PORTS[name] if default is None else default
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise SettingsError(f"{name}={value!r} is not a port number")
    return port


def embedded_model_url(env: Mapping[str, str]) -> str | None:
    """The /v1 URL of the local model the embedded stack runs (`durafact up`), if it runs
    and answers: what a worker with no model endpoint configured uses."""
    return stack.local_model_url(state_home(env), env_port(env, MODEL_PORT_ENV))


def ui_url_for(address: str, env: Mapping[str, str]) -> str:
    """Where the Web UI of the server at `address` is (see the module docstring)."""
    if env.get("DURAFACT_UI_URL"):
        return env["DURAFACT_UI_URL"]
    if address.rpartition(":")[0].endswith(CLOUD_HOSTS):
        return CLOUD_UI_URL
    embedded = stack.ui_url(state_home(env), address)
    return embedded or f"http://localhost:{env_port(env, UI_PORT_ENV)}"


# The variables durafact reads: checked for text that is not UTF-8.
OUR_PREFIXES = ("TEMPORAL_", "DURAFACT_", "OPENAI_")


class Settings(BaseModel):
    """Where Temporal and the model live."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    temporal_address: str = DEFAULT_ADDRESS
    """`host:port` of the Temporal frontend."""
    temporal_address_explicit: bool = False
    """An address was configured (`TEMPORAL_ADDRESS` or a profile): the command line
    then never starts a server of its own, and an unreachable one is an error."""
    temporal_address_source: str = "the default address"
    """Where the address came from, for messages: `TEMPORAL_ADDRESS`, `profile 'x' in
    FILE`, `embedded`."""
    temporal_namespace: str = "default"
    temporal_profile: InstanceOf[ClientConfigProfile] = Field(
        default_factory=ClientConfigProfile, exclude=True, repr=False
    )
    """The rest of the connection from `temporalio.envconfig`: API key, TLS, gRPC
    metadata. The address and namespace above win over the profile's."""
    task_queue: str = "durafact"
    openai_base_url: str | None = None
    openai_api_key: str | None = Field(default=None, repr=False, exclude=True)
    endpoints: dict[str, Endpoint] = Field(default_factory=dict)
    """Named endpoints besides `default`, by name: what `SourceSpec.embedding_endpoint`
    may name. Only these (and `default`) ever receive a key."""
    model: str = DEFAULT_MODEL
    ui_url: str = DEFAULT_UI_URL

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from `env` (default: this process's environment) and the
        profile file it names; raises SettingsError with a one-line reason."""
        env = dict(os.environ if env is None else env)
        for name, value in env.items():
            # Python keeps undecodable bytes as surrogates; they fail later, far from here.
            if name.startswith(OUR_PREFIXES) and not value.isascii():
                try:
                    value.encode()
                except UnicodeEncodeError:
                    raise SettingsError(f"{name} is not valid UTF-8 text") from None
        profile = temporal_profile(env)
        address = profile.address or ""
        if not address and (profile.api_key or (profile.tls and not profile.tls.disabled)):
            what = "an API key" if profile.api_key else "TLS"
            raise SettingsError(
                f"{what} is configured for Temporal but no address: set TEMPORAL_ADDRESS "
                f"(or `address` in {profile_description(env)})"
            )
        try:
            endpoints = configured_endpoints(env)
            del endpoints[DEFAULT_ENDPOINT]  # the fields below hold it
        except EndpointError as exc:
            raise SettingsError(str(exc)) from None
        default_address = f"localhost:{env_port(env, TEMPORAL_PORT_ENV)}"
        return cls(
            temporal_address=address or default_address,
            temporal_address_explicit=bool(address),
            temporal_address_source=address_source(env) if address else default_source(env),
            temporal_namespace=profile.namespace or "default",
            temporal_profile=profile,
            task_queue=env.get("DURAFACT_TASK_QUEUE") or "durafact",
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            endpoints=endpoints,
            model=env.get("DURAFACT_MODEL") or DEFAULT_MODEL,
            ui_url=ui_url_for(address or default_address, env).rstrip("/"),
        )

    def all_endpoints(self) -> dict[str, Endpoint]:
        """Every endpoint the worker may call, by name: `default` first."""
        default = default_endpoint(self.openai_base_url, self.openai_api_key)
        return {default.name: default, **self.endpoints}

    def workflow_url(self, workflow_id: str, run_id: str | None = None) -> str:
        """The Web UI page of one workflow (the run's page when the run is known)."""
        base = f"{self.ui_url}/namespaces/{quote(self.temporal_namespace)}/workflows/"
        url = base + quote(workflow_id, safe="")
        return f"{url}/{run_id}/history" if run_id else url


def temporal_profile(env: Mapping[str, str]) -> ClientConfigProfile:
    """The client profile `temporalio.envconfig` makes of `env` and the profile file."""
    config_file = env.get("TEMPORAL_CONFIG_FILE")
    if config_file and not Path(config_file).exists():
        raise SettingsError(f"TEMPORAL_CONFIG_FILE={config_file}: no such file")
    try:
        return ClientConfigProfile.load(override_env_vars=env)
    except RuntimeError as exc:  # the bridge's ConfigError: a missing profile, bad TOML
        reason = " ".join(str(exc).split())
        if "not found" in reason and env.get("TEMPORAL_PROFILE"):
            reason = f"TEMPORAL_PROFILE={env['TEMPORAL_PROFILE']}: no such profile"
        raise SettingsError(f"{reason} (in {profile_file(env)})") from None


def default_source(env: Mapping[str, str]) -> str:
    return TEMPORAL_PORT_ENV if env.get(TEMPORAL_PORT_ENV) else "the default address"


def address_source(env: Mapping[str, str]) -> str:
    return "TEMPORAL_ADDRESS" if env.get("TEMPORAL_ADDRESS") else profile_description(env)


def profile_description(env: Mapping[str, str]) -> str:
    return f"profile {env.get('TEMPORAL_PROFILE') or 'default'!r} in {profile_file(env)}"


def profile_file(env: Mapping[str, str]) -> str:
    """The profile file envconfig reads: TEMPORAL_CONFIG_FILE, or the platform's default."""
    if env.get("TEMPORAL_CONFIG_FILE"):
        return env["TEMPORAL_CONFIG_FILE"]
    home = Path(env.get("HOME") or Path.home())
    if sys.platform == "darwin":
        config_dir = home / "Library" / "Application Support"
    elif sys.platform == "win32":
        config_dir = Path(env.get("APPDATA") or home)
    else:
        config_dir = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return str(config_dir / "temporalio" / "temporal.toml")
