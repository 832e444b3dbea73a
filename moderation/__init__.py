"""Content moderation: classifier backends, per-tier policies, violations and escalation (docs/moderation.md).

The pass pipeline around a run (``runs``) calls :mod:`moderation.services`; ``/v1/moderations`` (``openai_api``)
calls the backends directly.
"""
