"""The README's configuration table and docker-compose.yml stay in step with the settings that are read."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _config_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["config_table"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_environment_variable_is_in_the_readme() -> None:
    variables = _config_table().all_variables()
    names = {v.name for v in variables}
    assert {"DATABASE_URL", "REDIS_URL", "CHAT_MAX_CONTENT_CHARS", "ENGINE_MAX_NUM_SEQS"} <= names
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", readme, flags=re.MULTILINE))
    missing = sorted(names - documented)
    assert not missing, f"README 'Configuration' lacks {missing}: run `python scripts/config_table.py --write`"


def test_every_documented_default_matches_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = {line.split("`", 2)[1]: line for line in readme.splitlines() if line.startswith("| `")}
    for var in _config_table().all_variables():
        row = rows.get(var.name)
        if row is None:
            continue  # reported by test_every_environment_variable_is_in_the_readme
        assert f"| {var.default.replace('|', chr(92) + '|')} |" in row, f"README's default for {var.name} is stale"


def test_compose_runs_every_process_with_known_variables() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "dispatcher", "worker", "flower"} <= set(services)
    known = {v.name for v in _config_table().all_variables()} | {"DJANGO_SETTINGS_MODULE"}
    for name, service in services.items():
        if name in ("postgres", "redis"):
            continue
        unknown = set(service.get("environment", {})) - known
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"
    assert "uvicorn chatproject.asgi:application" in " ".join(services["web"]["command"])
    assert services["dispatcher"]["command"] == ["python", "manage.py", "run_dispatcher"]
    worker = " ".join(services["worker"]["command"])
    for part in ("celery -A chatproject worker", "-P threads", "-Q pro,plus,free,batch", "--prefetch-multiplier 1"):
        assert part in worker


def test_compose_prometheus_scrapes_the_web_and_the_workers_metrics_ports() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    mounted = " ".join(services["prometheus"]["volumes"])
    assert "./deploy/prometheus.yml:" in mounted
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets["chat"] == ["web:8000"]
    assert targets["vllm"] == [f"worker:{services['worker']['environment']['WORKER_METRICS_PORT']}"]
