"""The documentation and docker-compose.yml stay in step with the code.

The configuration table of ``docs/configuration.md`` lists every variable the settings read, with the code's
defaults; the README stays a short front door that links every page under ``docs/``, and no relative link of the
README or of a page points at a file or heading that is not there.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"
README_MAX_LINES = 260


@functools.cache
def _config_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["config_table"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_environment_variable_is_in_the_configuration_page() -> None:
    variables = _config_table().all_variables()
    names = {v.name for v in variables}
    assert {"DATABASE_URL", "REDIS_URL", "CHAT_MAX_CONTENT_CHARS", "ENGINE_MAX_NUM_SEQS"} <= names
    page = CONFIGURATION_PAGE.read_text()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", page, flags=re.MULTILINE))
    missing = sorted(names - documented)
    assert not missing, f"docs/configuration.md lacks {missing}: run `python scripts/config_table.py --write`"


def test_every_documented_default_matches_the_code() -> None:
    page = CONFIGURATION_PAGE.read_text()
    rows = {line.split("`", 2)[1]: line for line in page.splitlines() if line.startswith("| `")}
    for var in _config_table().all_variables():
        row = rows.get(var.name)
        if row is None:
            continue  # reported by test_every_environment_variable_is_in_the_configuration_page
        assert f"| {var.default.replace('|', chr(92) + '|')} |" in row, (
            f"docs/configuration.md's default for {var.name} is stale"
        )


def test_compose_runs_every_process_with_known_variables() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "dispatcher", "worker", "flower"} <= set(services)
    known = {v.name for v in _config_table().all_variables()} | {"DJANGO_SETTINGS_MODULE"}
    for name, service in services.items():
        if "build" not in service:
            continue  # not our image (postgres, redis, prometheus, grafana): its variables are its own
        unknown = set(service.get("environment", {})) - known
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"
    assert "uvicorn chatproject.asgi:application" in " ".join(services["web"]["command"])
    assert services["dispatcher"]["command"] == ["python", "manage.py", "run_dispatcher"]
    worker = " ".join(services["worker"]["command"])
    for part in ("celery -A chatproject worker", "-P threads", "-Q pro,plus,free,batch", "--prefetch-multiplier 1"):
        assert part in worker


def test_compose_prometheus_scrapes_one_target_the_web() -> None:
    """The web's /metrics carries the workers' vLLM families too (merged from Redis): no per-worker job."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    mounted = " ".join(services["prometheus"]["volumes"])
    assert "./deploy/prometheus.yml:" in mounted
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets == {"chat": ["web:8000"]}
    assert "WORKER_METRICS_PUBLISH_S" in services["worker"]["environment"]


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Host path -> container path of a service's bind mounts."""
    pairs = (volume.split(":") for volume in service["volumes"])
    return {parts[0]: parts[1] for parts in pairs if parts[0].startswith("./")}


def test_compose_grafana_is_provisioned_with_the_prometheus_datasource_and_the_dashboard() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    grafana = services["grafana"]
    image, _, tag = grafana["image"].partition(":")
    assert image == "grafana/grafana" and re.fullmatch(r"\d+\.\d+\.\d+", tag), "pin Grafana's version"
    assert "prometheus" in grafana["depends_on"]
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer" and "GF_SECURITY_ADMIN_PASSWORD" in env
    mounts = _mounts(grafana)
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"

    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    [datasource] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    port = services["prometheus"]["ports"][0].split(":")[-1]
    assert datasource["type"] == "prometheus" and datasource["url"] == f"http://prometheus:{port}"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "chat-serving.yml").read_text())["providers"]
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    home = env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    dashboards = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
    assert f"{provider['options']['path']}/chat-serving.json" == home and dashboards

    for path in dashboards:
        dashboard = json.loads(path.read_text())
        panels = [p for p in dashboard["panels"] if p["type"] != "row"]
        assert panels, path
        for panel in panels:
            assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _without_code(text: str) -> str:
    """The text without its fenced code blocks and inline code: a link written in code is not a link."""
    return re.sub(r"`[^`]*`", "", _without_code_blocks(text))


def _relative_links(path: Path) -> list[str]:
    """Every link target of ``path`` that is not a URL (``http:``, ``mailto:``...), as written."""
    targets = re.findall(r"\]\(([^)\s]+)\)", _without_code(path.read_text()))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def _anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes for ``path``: lowercased, punctuation dropped, spaces to hyphens."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _without_code_blocks(path.read_text()), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def test_every_docs_page_is_linked_from_the_readme() -> None:
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages, "docs/ has no page"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _relative_links(ROOT / "README.md")}
    unlinked = [p.name for p in pages if p.resolve() not in linked]
    assert not unlinked, f"README.md links no page {unlinked}: add them to its index"


def test_every_relative_link_points_at_a_file_that_exists() -> None:
    broken = []
    for path in _markdown_files():
        for target in _relative_links(path):
            file_part = target.partition("#")[0]
            if file_part and not (path.parent / file_part).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, f"links to files that are not there: {broken}"


def test_every_anchor_of_a_relative_link_is_a_heading_of_its_page() -> None:
    broken = []
    for path in _markdown_files():
        for target in _relative_links(path):
            file_part, _, anchor = target.partition("#")
            page = (path.parent / file_part) if file_part else path
            if anchor and page.suffix == ".md" and page.exists() and anchor not in _anchors(page):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, f"links to headings that are not there: {broken}"


def test_the_readme_stays_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail to a page under docs/"
