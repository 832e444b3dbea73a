"""Creates one demo user per tier for local use (`make run` calls it)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.models import Tier, User


class Command(BaseCommand):
    help = "Create or reset demo-free, demo-plus, demo-pro and demo-batch (password: DEMO_PASSWORD, default 'demo')."

    def handle(self, *args: Any, **options: Any) -> None:
        password = settings.DEMO_PASSWORD
        for tier in Tier.objects.order_by("priority"):
            user, _ = User.objects.get_or_create(username=f"demo-{tier.name}", defaults={"tier": tier})
            user.tier = tier
            user.set_password(password)
            user.save()
            self.stdout.write(f"demo user: {user.username} / {password} (tier {tier.name})")
