"""``python manage.py redis_acl [--out FILE] [--password ROLE=SECRET ...]``: the Redis ACL file of the roles.

One user per role (web, worker, dispatcher, celery) limited to the keys and commands that role's code uses
(``monitoring.redis_acl``), plus ``replica`` and ``sentinel`` for the servers; nobody can log in as ``default`` (its
password is a thrown-away secret's hash; ``monitoring.redis_acl.default_user_line`` says why it is not off). A user
without ``--password`` gets a random one. With ``--out`` the file is written with mode 600 (load it with
``aclfile <path>`` in redis.conf); without, it is printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from monitoring.redis_acl import acl_lines, role_passwords


class Command(BaseCommand):
    help = "Print or write the Redis ACL file with one user per role (docs/high-availability.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", default="", help="write the file here (mode 600) instead of printing it")
        parser.add_argument(
            "--password", action="append", default=[], metavar="ROLE=SECRET", help="a user's password (repeatable)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        given: dict[str, str] = {}
        for item in options["password"]:
            role, sep, secret = item.partition("=")
            if not sep or not secret or any(c.isspace() for c in secret) or secret.startswith((">", "<", "#")):
                raise CommandError(f"--password {role}=...: give ROLE=SECRET, a secret without spaces")
            given[role] = secret
        passwords = role_passwords(given)
        unknown = set(given) - set(passwords)
        if unknown:
            raise CommandError(f"no such user: {', '.join(sorted(unknown))} (users: {', '.join(passwords)})")
        text = "\n".join(acl_lines(passwords)) + "\n"
        out = options["out"]
        if not out:
            self.stdout.write(text, ending="")
            return
        path = Path(out)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        path.chmod(0o600)
        self.stdout.write(f"redis_acl: wrote {len(passwords)} users to {path}")
