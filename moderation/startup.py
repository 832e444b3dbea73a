"""What a web process does at start for moderation (``chatproject.asgi``'s lifespan)."""

from __future__ import annotations

import asyncio

from moderation.services import moderation_warm_up


async def moderation_startup() -> None:
    """Loads the classifier before the process serves, off the event loop."""
    await asyncio.to_thread(moderation_warm_up)
