"""The router for ``model: "auto"``: decisions per second, agreement with the labelled set, and the cost per 1,000
prompts with and without routing.

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_router_bench REDIS_URL="$(redis_url 13)" \\
        .venv/bin/python bench/router_bench.py --seconds 3

1. **Policy core** (``model_routing.policy``, no Django): the chain rules -> difficulty score -> spill with the
   committed classifier over the labelled prompts, for ``--seconds``: decisions per second and the time of one
   decision (the score alone too).
2. **Agreement**: the classifier's label (score >= 0.5) against the labelled set's, on the held-out families (never
   seen in training) and on the training ones.
3. **Cost per 1,000 prompts** on a mixed workload: every labelled prompt once (easy and hard as in the set), its
   prompt tokens counted with the serving tokenizer, its answer as long as the set's ``output_tokens``. Only one
   small model ships (SmolLM2), so two deployments of it stand in for a small and a large model: the default
   deployment as the small one and ``smol-large@v1`` (the same weights, other engine arguments) as the large one,
   each with a cost per million tokens (``--small-cost``, ``--large-cost``: input/output). "Without routing" sends
   every prompt to the large model; "routed" asks the real ``route_auto`` (free tier, no spill: no dispatcher
   publishes gates here) and prices the deployment it names; "oracle" routes by the labels. ``route_auto``'s own
   time per call (per-process snapshots warm) is printed too.

It creates and migrates the database if needed, writes the two deployments' costs there (the large stand-in is
registered as a row on the default's local copy; no worker runs: both are listed as having one in Redis) and
flushes the Redis database (never db 0). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.stack import ensure_database  # noqa: E402
from model_routing.difficulty import (  # noqa: E402
    LabelledPrompt,
    agreement,
    default_model,
    is_held_out,
    labelled_prompts,
)
from model_routing.policy import ModelSize, RouteFacts, RouterConfig, build_router, decide  # noqa: E402

LARGE_NAME = "smol-large"
LARGE_VERSION = "v1"


class NoGates:
    def closed(self, tier: str, size: ModelSize) -> bool | None:
        return None


def facts_of(prompt: LabelledPrompt, prompt_tokens: int) -> RouteFacts:
    return RouteFacts(
        prompt_text=prompt.prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=0,  # the client named no max_tokens (the usual case)
        has_tools=False,
        structured=False,
        tier_name="free",
    )


def bench_core(prompts: list[LabelledPrompt], seconds: float) -> None:
    model = default_model()
    router = build_router(RouterConfig(spill_enabled=True), scorer=model, gates=NoGates())
    facts = [facts_of(p, len(p.prompt) // 4) for p in prompts]
    decided = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for f in facts:
            decide(router, f, small="small", large="large")
        decided += len(facts)
    elapsed = time.perf_counter() - started
    per_score: list[float] = []
    for p in prompts:
        t0 = time.perf_counter()
        model.score(p.prompt)
        per_score.append((time.perf_counter() - t0) * 1e6)
    print("## Policy core (rules -> classifier -> spill), one thread")
    print(f"decisions/s: {decided / elapsed:,.0f}  ({elapsed / decided * 1e6:.1f} µs per decision, {decided:,} made)")
    print(
        f"difficulty score alone: p50 {statistics.median(per_score):.1f} µs, "
        f"p99 {statistics.quantiles(per_score, n=100)[98]:.1f} µs, max {max(per_score):.1f} µs "
        f"(prompts of {min(len(p.prompt) for p in prompts)}-{max(len(p.prompt) for p in prompts)} characters)"
    )


def bench_agreement(prompts: list[LabelledPrompt]) -> None:
    model = default_model()
    held = [p for p in prompts if is_held_out(p.family)]
    seen = [p for p in prompts if not is_held_out(p.family)]
    print("\n## Agreement with the labelled set (score >= 0.5 is hard)")
    print(
        f"held out: {agreement(model, held):.3f} on {len(held)} prompts of "
        f"{len({p.family for p in held})} families never seen in training"
    )
    print(f"training: {agreement(model, seen):.3f} on {len(seen)} prompts")
    wrong = [p for p in held if (model.score(p.prompt) >= 0.5) != p.hard]
    for p in wrong:
        print(f"  disagrees ({'hard' if p.hard else 'easy'}, score {model.score(p.prompt):.2f}): {p.prompt[:90]!r}")


def configure_django() -> None:
    ensure_database(os.environ["DATABASE_URL"])  # created if missing, migrated, its default deployment ready
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def parse_cost(text: str) -> tuple[Decimal, Decimal]:
    given, _, output = text.partition("/")
    return Decimal(given), Decimal(output or given)


def bench_cost(prompts: list[LabelledPrompt], *, small_cost: str, large_cost: str, hard_share: float) -> None:
    configure_django()
    from django.conf import settings

    from accounts.models import Tier
    from core.redis_client import get_redis
    from deployments.models import DeploymentStatus, ModelDeployment
    from deployments.selection import forget_cached
    from deployments.tokenizer import count_tokens
    from generation.worker_contract import deployment_ready_key
    from model_routing.models import RoutePolicy
    from model_routing.selectors import forget_route_policies
    from model_routing.services import route_auto

    if settings.REDIS_URL.rsplit("/", 1)[-1] in ("", "0"):
        raise SystemExit("give the bench a Redis database of its own (REDIS_URL=.../13), not db 0")
    get_redis().flushdb()
    small = ModelDeployment.objects.get(is_default=True)
    small.cost_per_million_input_tokens, small.cost_per_million_output_tokens = parse_cost(small_cost)
    small.save()
    large, _ = ModelDeployment.objects.update_or_create(
        name=LARGE_NAME,
        version=LARGE_VERSION,
        defaults={
            "source_kind": small.source_kind,
            "local_path": small.local_path,
            "checksum": small.checksum,
            "engine_args": {**small.engine_args, "max_num_seqs": 8},
            "status": DeploymentStatus.READY,
            "cost_per_million_input_tokens": parse_cost(large_cost)[0],
            "cost_per_million_output_tokens": parse_cost(large_cost)[1],
        },
    )
    for row in (small, large):
        get_redis().zadd(deployment_ready_key(row.key), {"router-bench": time.time() + 3600})
    free = Tier.objects.get(name="free")
    RoutePolicy.objects.filter(tier=free).update(
        enabled=True, small_model=small.name, large_model=LARGE_NAME, spill_enabled=False
    )
    forget_cached()
    forget_route_policies()

    prices = {
        small.name: (small.cost_per_million_input_tokens, small.cost_per_million_output_tokens),
        LARGE_NAME: (large.cost_per_million_input_tokens, large.cost_per_million_output_tokens),
    }

    def cost(model: str, p: LabelledPrompt, tokens: int) -> Decimal:
        given, output = prices[model]
        return (given * tokens + output * p.output_tokens) / Decimal(1_000_000)

    tokens = {p.prompt: count_tokens(p.prompt) for p in prompts}
    route_auto(facts=facts_of(prompts[0], tokens[prompts[0].prompt]), tier=free)  # warm the snapshots
    routed, unrouted, oracle = Decimal(0), Decimal(0), Decimal(0)
    by_class: dict[bool, list[Decimal]] = {True: [Decimal(0)] * 3, False: [Decimal(0)] * 3}
    to_large = 0
    times: list[float] = []
    for p in prompts:
        t0 = time.perf_counter()
        decision = route_auto(facts=facts_of(p, tokens[p.prompt]), tier=free)
        times.append((time.perf_counter() - t0) * 1e6)
        to_large += decision.model == LARGE_NAME
        three = (
            cost(LARGE_NAME, p, tokens[p.prompt]),
            cost(decision.model, p, tokens[p.prompt]),
            cost(LARGE_NAME if p.hard else small.name, p, tokens[p.prompt]),
        )
        unrouted, routed, oracle = unrouted + three[0], routed + three[1], oracle + three[2]
        by_class[p.hard] = [a + b for a, b in zip(by_class[p.hard], three, strict=True)]
    per_k = Decimal(1000) / len(prompts)
    hard = sum(p.hard for p in prompts)
    print("\n## Cost per 1,000 prompts (mixed workload: the labelled set once)")
    print(
        f"workload: {len(prompts)} prompts, {hard} hard ({hard / len(prompts):.0%}); prompt tokens "
        f"{sum(tokens.values()):,} in all; output tokens {sum(p.output_tokens for p in prompts):,} in all"
    )
    print(
        f"costs assumed, per million tokens input/output: small {small.key} "
        f"{prices[small.name][0]}/{prices[small.name][1]}, large {large.key} "
        f"{prices[LARGE_NAME][0]}/{prices[LARGE_NAME][1]}"
    )
    print(f"without routing (all large): {unrouted * per_k:.4f}")
    print(
        f"routed (route_auto):         {routed * per_k:.4f}  ({1 - routed / unrouted:.1%} less; "
        f"{to_large / len(prompts):.0%} of prompts to the large model)"
    )
    print(f"oracle (by the labels):      {oracle * per_k:.4f}")
    share = Decimal(str(hard_share))
    mean = {k: [v / sum(p.hard == k for p in prompts) for v in vals] for k, vals in by_class.items()}
    mixed = [(share * h + (1 - share) * e) * 1000 for h, e in zip(mean[True], mean[False], strict=True)]
    print(
        f"reweighted to {share:.0%} hard (chat traffic is mostly easy): without {mixed[0]:.4f}, "
        f"routed {mixed[1]:.4f} ({1 - mixed[1] / mixed[0]:.1%} less), oracle {mixed[2]:.4f}"
    )
    print(
        f"route_auto per call (service, warm snapshots): p50 {statistics.median(times):.1f} µs, "
        f"p99 {statistics.quantiles(times, n=100)[98]:.1f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="How long the policy core runs (default 3).")
    parser.add_argument("--small-cost", default="0.05/0.20", help="Small model, per million tokens IN/OUT.")
    parser.add_argument("--large-cost", default="0.50/2.00", help="Large model, per million tokens IN/OUT.")
    parser.add_argument(
        "--hard-share", type=float, default=0.2, help="A second mix: this share of hard prompts (default 0.2)."
    )
    parser.add_argument("--no-cost", action="store_true", help="Skip the cost part (no database needed).")
    args = parser.parse_args()
    if not args.no_cost and "DATABASE_URL" not in os.environ:
        raise SystemExit("set DATABASE_URL (a database of the bench's own) and REDIS_URL, or pass --no-cost")
    prompts = list(labelled_prompts())
    bench_core(prompts, args.seconds)
    bench_agreement(prompts)
    if not args.no_cost:
        bench_cost(prompts, small_cost=args.small_cost, large_cost=args.large_cost, hard_share=args.hard_share)


if __name__ == "__main__":
    main()
