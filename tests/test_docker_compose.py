"""The production-like docker-compose.yml and Dockerfile promise what the docs say.

No Docker engine is needed: these parse the files and check the parts users rely on
(service names, ports, the Temporal/PostgreSQL wiring, the search attributes, the
worker's environment and scaling).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from durafact._runtime.payloads import store_from_env
from durafact._runtime.prices import prices_from_env
from durafact._runtime.search_attributes import NAMES, TYPES, type_name

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def _service(name: str) -> dict[str, Any]:
    return _compose()["services"][name]


def _env(service: dict[str, Any]) -> dict[str, str]:
    """`environment` as a dict, whether written as a mapping or as KEY=VALUE items."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _published_ports(service: dict[str, Any]) -> set[tuple[str, str]]:
    """(host port, container port) pairs, from short or long port syntax."""
    pairs = set()
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            pairs.add((str(port.get("published")), str(port.get("target"))))
        else:
            *_, host, container = str(port).split(":")
            pairs.add((host, container.split("/")[0]))
    return pairs


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Dependency name -> condition (short list syntax means `service_started`)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def _command_text(service: dict[str, Any]) -> str:
    """The service's entrypoint and command as one string, line continuations joined."""
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if value is None:
            continue
        parts.extend(value if isinstance(value, list) else [value])
    return " ".join(str(part) for part in parts).replace("\\\n", " ")


def _seconds(duration: str) -> float:
    """A Compose duration such as `2m`, `90s` or `1m30s`, in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", str(duration))
    assert parts, f"not a duration: {duration!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continuations joined."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return instructions


def _defaults(env: dict[str, str]) -> dict[str, str]:
    """`env` as Compose resolves it with no variables set: `${VAR:-default}` -> default."""
    return {key: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value) for key, value in env.items()}


def test_compose_defines_the_services() -> None:
    services = _compose()["services"]
    assert {
        "postgresql",
        "temporal",
        "temporal-ui",
        "temporal-setup",
        "minio",
        "minio-setup",
        "worker",
    } <= set(services)


def test_postgresql_is_health_checked_and_keeps_its_data_in_a_volume() -> None:
    postgresql = _service("postgresql")
    assert postgresql["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(postgresql["healthcheck"]["test"])
    assert any(
        str(volume).endswith(":/var/lib/postgresql/data") for volume in postgresql["volumes"]
    )
    env = _env(postgresql)
    assert env["POSTGRES_USER"] == "temporal"
    assert env["POSTGRES_PASSWORD"]


def test_temporal_persists_to_postgresql() -> None:
    temporal = _service("temporal")
    env = _env(temporal)
    assert env["DB"] == "postgres12"
    assert env["DB_PORT"] == "5432"
    assert env["POSTGRES_SEEDS"] == "postgresql"
    assert env["POSTGRES_USER"] == _env(_service("postgresql"))["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] == _env(_service("postgresql"))["POSTGRES_PASSWORD"]
    assert _depends_on(temporal)["postgresql"] == "service_healthy"


def test_temporal_server_image_is_pinned_to_a_release() -> None:
    image = _service("temporal")["image"]
    assert re.fullmatch(r"temporalio/auto-setup:1\.2\d\.\d+", image), image


def test_temporal_frontend_is_published_on_7233_and_health_checked() -> None:
    temporal = _service("temporal")
    assert ("7233", "7233") in _published_ports(temporal)
    assert "health" in " ".join(temporal["healthcheck"]["test"])


def test_web_ui_is_published_on_8233_and_points_at_temporal() -> None:
    ui = _service("temporal-ui")
    assert ui["image"].startswith("temporalio/ui")
    assert ("8233", "8080") in _published_ports(ui)
    env = _env(ui)
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "TEMPORAL_CORS_ORIGINS" in env


def test_setup_job_registers_every_search_attribute_with_its_type_and_waits_for_all() -> None:
    setup = _service("temporal-setup")
    assert setup["image"].startswith("temporalio/admin-tools")
    script = _command_text(setup)
    assert "temporal operator search-attribute create" in script
    created = dict(re.findall(r"--name\s+(\w+)\s+--type\s+(\w+)", script))
    assert created == {name: type_name(TYPES[name]) for name in NAMES}
    assert created["DurafactTokens"] == "Int" and created["DurafactCost"] == "Double"
    # The job succeeds only once the list shows every one of them.
    check = re.search(r"registered\(\) \{(.*?)\n\s*\}", script, re.S)
    assert check is not None
    assert all(name in check.group(1) for name in NAMES)
    assert "--address temporal:7233" in script


def test_setup_job_targets_the_configured_namespace() -> None:
    setup = _service("temporal-setup")
    script = _command_text(setup)
    namespace_refs = re.findall(r'--namespace\s+"?\$\$?\{?(\w+)', script)
    assert namespace_refs, "search-attribute commands must pass --namespace"
    for ref in namespace_refs:
        # Either Compose substitutes TEMPORAL_NAMESPACE directly, or the script reads a
        # variable that the service's environment sets from it.
        assert (
            ref == "TEMPORAL_NAMESPACE" or _env(setup).get(ref) == "${TEMPORAL_NAMESPACE:-default}"
        )


def test_setup_job_is_a_one_shot_that_waits_for_temporal() -> None:
    setup = _service("temporal-setup")
    assert str(setup.get("restart", "no")) in {"no", "False"}
    assert _depends_on(setup)["temporal"] == "service_healthy"
    # A retry loop, so a frontend that is up before its namespace is ready is not fatal.
    assert re.search(r"\b(for|until|while)\b", _command_text(setup))


def test_setup_script_shell_variables_survive_compose_interpolation() -> None:
    """Compose rewrites `$VAR`/`${VAR}` itself; shell variables must be written `$$`."""
    for job in ("temporal-setup", "minio-setup"):
        script = _command_text(_service(job)).replace("$$", "")
        leftovers = re.findall(r"\$\{?(\w+)", script)
        assert set(leftovers) <= {"TEMPORAL_NAMESPACE"}, (job, leftovers)


def test_minio_is_health_checked_and_keeps_payloads_in_a_volume() -> None:
    minio = _service("minio")
    assert re.fullmatch(r"minio/minio:RELEASE\.[\dT:-]+Z", minio["image"]), minio["image"]
    assert "server /data" in _command_text(minio)
    assert any(str(volume).endswith(":/data") for volume in minio["volumes"])
    assert "minio-data" in _compose()["volumes"]
    assert "ready" in " ".join(minio["healthcheck"]["test"])
    assert ("9000", "9000") in _published_ports(minio)


def test_bucket_job_creates_the_bucket_the_workers_use_once_minio_is_up() -> None:
    setup, minio = _service("minio-setup"), _service("minio")
    assert _depends_on(setup)["minio"] == "service_healthy"
    assert str(setup.get("restart", "no")) in {"no", "False"}
    script = _command_text(setup)
    assert "mc alias set payloads http://minio:9000" in script
    assert 'mc mb --ignore-existing "payloads/$$BUCKET"' in script
    env = _defaults(_env(setup))
    assert env["MINIO_ROOT_USER"] == _defaults(_env(minio))["MINIO_ROOT_USER"]
    assert env["MINIO_ROOT_PASSWORD"] == _defaults(_env(minio))["MINIO_ROOT_PASSWORD"]
    worker_store = store_from_env(_defaults(_env(_service("worker"))))
    assert worker_store.location == f"s3://{env['BUCKET']}"


def test_workers_store_large_payloads_in_minio_with_its_credentials() -> None:
    worker, minio = _service("worker"), _defaults(_env(_service("minio")))
    assert _depends_on(worker)["minio-setup"] == "service_completed_successfully"
    store = store_from_env(_defaults(_env(worker)))  # what the worker makes of its env
    assert store.location.startswith("s3://")
    assert store.threshold == 131072
    assert store.s3_options == {
        "endpoint_url": "http://minio:9000",
        "region_name": "us-east-1",
        "aws_access_key_id": minio["MINIO_ROOT_USER"],
        "aws_secret_access_key": minio["MINIO_ROOT_PASSWORD"],
    }


def test_worker_is_built_from_the_local_dockerfile() -> None:
    worker = _service("worker")
    build = worker["build"]
    if isinstance(build, str):
        build = {"context": build}
    assert build["context"] == "."
    assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
    # The app's worker: durafact's ready recipes beside the app's own.
    assert worker.get("command", ["python", "worker.py"]) == ["python", "worker.py"]


def test_worker_environment_configures_temporal_and_the_model() -> None:
    env = _env(_service("worker"))
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env["TEMPORAL_NAMESPACE"] == "${TEMPORAL_NAMESPACE:-default}"
    assert env["DURAFACT_TASK_QUEUE"] == "${DURAFACT_TASK_QUEUE:-durafact}"
    assert env["OPENAI_BASE_URL"].startswith("${OPENAI_BASE_URL:-http")
    assert env["OPENAI_API_KEY"].startswith("${OPENAI_API_KEY")
    assert env["DURAFACT_MODEL"] == "${DURAFACT_MODEL:-gpt-4o-mini}"


def test_worker_takes_prices_as_json_and_the_example_beside_it_is_a_valid_table() -> None:
    assert _env(_service("worker"))["DURAFACT_PRICES"] == "${DURAFACT_PRICES:-}"
    example = re.search(r"# (\{\"currency\".*\})\n\s*DURAFACT_PRICES:", COMPOSE_FILE.read_text())
    assert example is not None
    prices = prices_from_env({"DURAFACT_PRICES": example.group(1)})
    assert prices is not None and prices.currency == "USD" and "gpt-4o-mini" in prices.models


def test_worker_scales_by_replicas() -> None:
    worker = _service("worker")
    replicas = str(worker["deploy"]["replicas"])
    assert replicas == "${DURAFACT_WORKERS:-2}" or int(replicas) >= 1
    # Fixed names or host ports would make a second replica fail to start.
    assert "container_name" not in worker
    assert not worker.get("ports")


def test_worker_starts_only_after_search_attributes_exist() -> None:
    worker = _service("worker")
    assert _depends_on(worker)["temporal-setup"] == "service_completed_successfully"


def test_worker_gets_time_to_finish_in_flight_activities() -> None:
    worker = _service("worker")
    assert _seconds(worker["stop_grace_period"]) >= 30
    assert worker["restart"] == "unless-stopped"


def test_dockerfile_installs_durafact_without_the_local_extra_beside_the_app() -> None:
    instructions = _dockerfile_instructions()
    assert ("FROM", "python:3.11-slim") in instructions
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    installs = [run for run in runs if re.search(r"pip install\b.*\s\.(\s|$)", run + " ")]
    assert installs, runs
    assert not any("[local]" in run or "llama" in run for run in runs)
    copied = " ".join(args for keyword, args in instructions if keyword == "COPY")
    for needed in ("pyproject.toml", "durafact/", "workflows/", "activities/", "worker.py"):
        assert needed in copied


def test_dockerfile_runs_worker_as_non_root() -> None:
    instructions = _dockerfile_instructions()
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users and users[-1] not in {"root", "0"}
    assert ("STOPSIGNAL", "SIGTERM") in instructions
    cmd = [args for keyword, args in instructions if keyword == "CMD"][-1]
    assert json.loads(cmd) == ["python", "worker.py"]
