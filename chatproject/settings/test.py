"""Test settings: the same real Postgres and Redis, faster password hashing."""

from chatproject.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
