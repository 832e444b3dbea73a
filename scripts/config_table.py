#!/usr/bin/env python3
"""Prints the configuration table of ``docs/configuration.md``: every environment variable the settings read, with its
default.

Reads ``core/config.py`` (typed dataclasses; each field's docstring is its description) and
``chatproject/settings/base.py`` and ``production.py`` (the Django settings) with ``ast``, so nothing is imported
and nothing drifts.
After adding a variable run ``python scripts/config_table.py --write``: it rewrites the table in
``docs/configuration.md`` (without ``--write`` it prints the table). ``tests/project/test_project_files.py`` fails
while a variable is missing from that page or its default there is stale.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "core" / "config.py"
SETTINGS = ROOT / "chatproject" / "settings" / "base.py"
PRODUCTION_SETTINGS = ROOT / "chatproject" / "settings" / "production.py"

# Django settings have no dataclass docstrings: their descriptions live here.
SETTINGS_HELP = {
    "DJANGO_SECRET_KEY": (
        "Django's secret key. Set it in every deployment: the production settings refuse to load without one of at"
        " least 50 random characters."
    ),
    "DJANGO_DEBUG": "Django debug mode (never in production: the production settings force it off).",
    "DJANGO_ALLOWED_HOSTS": "Comma-separated host names the web process answers.",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "Comma-separated origins (scheme://host[:port]) trusted for CSRF behind a proxy.",
    "DEMO_PASSWORD": "Password of the demo users that `make run` creates (local use only).",
    "DATABASE_URL": "Postgres, as a URL.",
    "DB_CONN_MAX_AGE": (
        "Seconds a database connection is kept open (0: one per request); must be 0 while the pool is on."
    ),
    "DB_POOL_MAX_SIZE": (
        "Postgres connections each process may pool (psycopg_pool; 0: no pool, a connection per request or task)."
        " The worker holds one per run in progress, so at least `ENGINE_MAX_NUM_SEQS`; every process's pool together"
        " must stay under Postgres' `max_connections`."
    ),
    "DB_POOL_TIMEOUT_S": "Seconds a request or task waits for a pooled connection before it fails.",
    "API_TOKEN_CACHE_S": (
        "Seconds a web process keeps an API token's user, tier and limits in memory (0: off): a revoked token, a"
        " deactivated user or changed limits take effect within this time (accounts/authentication.py)."
    ),
    "REDIS_URL": (
        "Redis for streams, buckets, scheduler queues, heartbeats and cancel signals, with the role's ACL user"
        " (`rediss://`: TLS; under `REDIS_SENTINELS` only its user, password, db and scheme count):"
        " [High availability](high-availability.md)."
    ),
    "CELERY_BROKER_URL": (
        "Celery's broker (a Redis URL, user `celery`); under `REDIS_SENTINELS` the settings make it a "
        "`sentinel://` URL and transport (docs/high-availability.md)."
    ),
    "LOG_LEVEL": "Root log level.",
    "LOG_FORMAT": (
        "`plain` (readable lines, run fields appended as `key=value`) or `json` (one JSON object per line: "
        "`ts`, `level`, `logger`, `message`, the run's fields, `request_id`). See [Logs](operations.md#logs)."
    ),
    "METRICS_TOKEN": "When set, `GET /metrics` needs `Authorization: Bearer <token>`; empty: open (keep it internal).",
    "CELERY_VISIBILITY_TIMEOUT_S": "Seconds before an unacknowledged task is redelivered: longer than the longest run.",
    "CELERY_TASK_SEND_SENT_EVENT": (
        "Publish Celery's `task-sent` event with every dispatched run (Flower shows a task from when it is sent; "
        "off: from when a worker receives it). It costs one more publish per run from the dispatcher "
        "([Dispatcher ceiling](benchmarks.md#dispatcher-ceiling))."
    ),
    "CELERY_BROKER_KEY_PREFIX": (
        "Prefix for every broker key, so independent stacks can share one Redis database (the browser tests use it)."
    ),
    "DJANGO_SECURE_PROXY_SSL_HEADER": (
        "Production settings: trust `X-Forwarded-Proto: https` from the reverse proxy that ends TLS (it must"
        " overwrite the client's header)."
    ),
    "DJANGO_SECURE_SSL_REDIRECT": (
        "Production settings: redirect HTTP to HTTPS (except `/healthz`, `/readyz`, `/metrics`)."
    ),
    "DJANGO_SECURE_HSTS_SECONDS": "Production settings: `Strict-Transport-Security` max-age.",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "Production settings: HSTS for every subdomain too.",
    "DJANGO_SECURE_HSTS_PRELOAD": "Production settings: the HSTS `preload` directive (for browsers' preload lists).",
    "AUTH_LOCKOUT_FAILURES": (
        "Failed sign-ins (token API, `/login/`, `/admin/login/`) within the cool-off after which an account (from any"
        " address) or a client address (on any account) is refused with 429 and `Retry-After`."
    ),
    "AUTH_LOCKOUT_COOLOFF_S": (
        "Seconds a failure counts, and so how long a lockout lasts after the last failure that counted."
    ),
    "AUTH_PROXY_COUNT": (
        "Reverse proxies in front of the web process that append to `X-Forwarded-For`: the login throttle takes the"
        " client address from that header, this many entries from the right (0: `REMOTE_ADDR`)."
    ),
}


# Variables the shell scripts read (they never reach Django's settings): name, default, description.
SCRIPT_VARIABLES = [
    ("PORT", "8000", "`make run`: the web port (127.0.0.1)."),
    (
        "FLOWER_BASIC_AUTH",
        "",
        "Flower's `user:password`; required (`scripts/flower.sh` refuses to start without it). `make run` "
        "generates one into `var/flower-password`; compose reads it from `.env`.",
    ),
    ("FLOWER_ADDRESS", "127.0.0.1", "Where Flower listens (`0.0.0.0` in compose, published on 127.0.0.1)."),
    ("FLOWER_PORT", "5555", "Flower's port."),
    ("FLOWER_URL_PREFIX", "", "Flower behind a reverse proxy under a path prefix."),
    ("CELERY_BIN", ".venv/bin/celery", "The `celery` command `scripts/flower.sh` runs (`celery` in the image)."),
    ("SUPERVISOR_RUN_DIR", "var", "`make run`: where supervisord keeps its socket and pid file."),
    ("WORKER_NAME", "worker@%h", "`scripts/worker.sh`: the Celery worker's name (`%h`: the host name)."),
]


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str
    default: str
    help: str
    source: str


def _env_calls(node: ast.AST) -> list[ast.Call]:
    """Every ``env.<kind>("NAME", default=...)`` call in ``node``, in source order."""
    calls = [
        sub
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and isinstance(sub.func.value, ast.Name)
        and sub.func.value.id == "env"
        and sub.args
        and isinstance(sub.args[0], ast.Constant)
    ]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _env_call(node: ast.AST) -> ast.Call | None:
    """The first ``env.<kind>(...)`` call in ``node``, if there is one."""
    calls = _env_calls(node)
    return calls[0] if calls else None


def _default(call: ast.Call) -> str:
    for keyword in call.keywords:
        if keyword.arg == "default":
            text = ast.unparse(keyword.value)
            if "BASE_DIR" in text:  # a path inside the project
                constants = [p for p in ast.walk(keyword.value) if isinstance(p, ast.Constant)]
                parts = [p.value for p in sorted(constants, key=lambda p: p.col_offset)]
                return "`<project>/" + "/".join(str(p) for p in parts) + "`"
            if isinstance(keyword.value, ast.Name):  # another setting, e.g. REDIS_URL
                return f"`{keyword.value.id}`'s value"
            value = ast.literal_eval(keyword.value)
            if isinstance(value, list):
                return "`" + ",".join(value) + "`" if value else "(empty)"
            if value == "":
                return "(empty)"
            return f"`{value}`"
    return "(required)"


def _field_docs(tree: ast.Module) -> dict[tuple[str, str], str]:
    """(dataclass name, field name) -> the field's docstring."""
    docs: dict[tuple[str, str], str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for current, following in itertools.pairwise(cls.body):
            if (
                isinstance(current, ast.AnnAssign)
                and isinstance(current.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                text = " ".join(following.value.value.split())
                docs[(cls.name, current.target.id)] = text.replace("``", "`")
    return docs


def config_variables() -> list[Variable]:
    tree = ast.parse(CONFIG.read_text())
    docs = _field_docs(tree)
    found: list[Variable] = []
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("_from_env")):
        for ret in (n for n in ast.walk(func) if isinstance(n, ast.Return)):
            if not (isinstance(ret.value, ast.Call) and isinstance(ret.value.func, ast.Name)):
                continue
            dataclass_name = ret.value.func.id
            for keyword in ret.value.keywords:
                call = _env_call(keyword.value)
                if call is None or keyword.arg is None:
                    continue
                if not (isinstance(call.func, ast.Attribute) and isinstance(call.args[0], ast.Constant)):
                    raise TypeError(f"line {call.lineno}: env.<type>(...) must name its variable as a literal")
                found.append(
                    Variable(
                        name=str(call.args[0].value),
                        kind=call.func.attr,
                        default=_default(call),
                        help=docs.get((dataclass_name, keyword.arg), ""),
                        source=f"`settings.{dataclass_name}.{keyword.arg}`",
                    )
                )
    return found


def settings_variables() -> list[Variable]:
    found: list[Variable] = []
    for path in (SETTINGS, PRODUCTION_SETTINGS):  # production-only variables after base's
        found.extend(_settings_file_variables(path, known={v.name for v in found}))
    return found


def _settings_file_variables(path: Path, known: set[str]) -> list[Variable]:
    tree = ast.parse(path.read_text())
    found: list[Variable] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        for call in _env_calls(node):  # a dict setting may read several variables
            if not isinstance(call.func, ast.Attribute) or not isinstance(call.args[0], ast.Constant):
                continue
            name = str(call.args[0].value)
            if name in known or any(v.name == name for v in found):
                continue
            found.append(
                Variable(
                    name=name,
                    kind=call.func.attr,
                    default=_default(call),
                    help=SETTINGS_HELP.get(name, ""),
                    source="Django settings",
                )
            )
    return found


def script_variables() -> list[Variable]:
    return [Variable(name, "str", f"`{d}`" if d else "(empty)", text, "scripts") for name, d, text in SCRIPT_VARIABLES]


def all_variables() -> list[Variable]:
    return settings_variables() + config_variables() + script_variables()


def markdown_table() -> str:
    rows = ["| variable | type | default | what it sets |", "| --- | --- | --- | --- |"]
    for var in all_variables():
        text, default = (value.replace("|", "\\|") for value in (var.help, var.default))
        rows.append(f"| `{var.name}` | {var.kind} | {default} | {text} |")
    return "\n".join(rows)


CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"
"""The page that holds the table (relative links in the descriptions are relative to ``docs/``)."""


def write_table(page: Path = CONFIGURATION_PAGE) -> None:
    """Replaces the variables table of ``page`` (the first table whose header starts ``| variable |``) in place."""
    lines = page.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("| variable |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    lines[start:end] = [markdown_table() + "\n"]
    page.write_text("".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_table()
    else:
        print(markdown_table())
