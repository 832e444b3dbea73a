"""Fair, tier-aware scheduling of admitted runs onto the inference engines.

Pure Python: nothing in this package imports Django. ``policy`` decides the order (per-user virtual token
counters within a tier, strict priority with floor shares across tiers) and ``gate`` decides whether the
engines have room; ``store`` is the contract of the queues that web processes push to and dispatchers claim
from (one small role per consumer, ``QueueStore`` their union), kept in Redis by ``redis_store`` (a deployment)
or in memory by ``memory_store`` (tests, the virtual-time benchmark), and ``token_bucket`` is the atomic Redis
step that admits or refuses a prompt. ``dispatcher`` ties them together; the Django side (``runs/quota.py``,
``python manage.py run_dispatcher``) only supplies limits, engine statistics and the way into Celery.
"""
