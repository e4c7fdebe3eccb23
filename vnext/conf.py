"""The platform's settings: one `VNEXT` dict in Django settings, with defaults defined here."""

import hashlib
from functools import lru_cache
from typing import Any

from django.conf import settings

from instances.engine.egress import EgressPolicy
from instances.engine.script_pool import PoolSettings
from instances.engine.script_runner import DEFAULT_HEADER_DENY_PATTERNS, HeaderDenyList
from instances.engine.targets import NamedTargets

DEFAULTS: dict[str, Any] = {
    # Wall-clock limit for one script call (rule, mapping, timer, ...), in seconds.
    "SCRIPT_TIMEOUT_SECONDS": 2.0,
    # Script worker processes (per server or Celery process); None = one per CPU.
    "SCRIPT_WORKERS": None,
    # Address-space limit of each script worker, in MiB.
    "SCRIPT_MEMORY_MB": 512,
    # The user script workers run as when the server runs as root.
    "SCRIPT_WORKER_USER": "nobody",
    # Largest JSON a script call may send or answer, in bytes.
    "SCRIPT_MAX_PAYLOAD_BYTES": 16 * 1024 * 1024,
    # How long a call waits for a free script worker before `Script:Unavailable`.
    "SCRIPT_POOL_WAIT_SECONDS": 10.0,
    # Values scripts may read as `context.configuration` (e.g. `{"Example:ApiBaseUrl": ...}`):
    # what an operator chooses to show them, never settings or secrets.
    "SCRIPT_CONFIGURATION": {},
    # How long a sync request waits for its instance's due error-boundary retries (it runs
    # them itself when no worker has) before it answers with the instance still Busy.
    "SYNC_RETRY_WAIT_SECONDS": 10.0,
    # How long a sync updateData waits for its turn in the instance's write lane (then 202).
    "DATA_WRITE_WAIT_SECONDS": 10.0,
    # What the trigger task types (11 start, 12 direct trigger, 14 subprocess) start instances
    # and run transitions with (`instances.writers`): "routing" sends a domain REMOTE_DOMAINS
    # names (`{"payments": "https://pay.example/api/v1"}`) over HTTP to that runtime, with the
    # token REMOTE_TOKENS gives for it, and serves every other domain with the instance
    # services in-process; "local" serves every domain in-process; None: no writer.
    "INSTANCE_WRITER": "routing",
    "REMOTE_DOMAINS": {},
    "REMOTE_TOKENS": {},
    # State notifications: the channel class, the webhook (URL, HMAC secret, timeout), or the
    # Redis pub/sub channel. The secret defaults to one derived from SECRET_KEY.
    "NOTIFICATION_CHANNEL": "instances.notifications.WebhookChannel",
    "NOTIFICATION_WEBHOOK_URL": "",
    "NOTIFICATION_SECRET": None,
    "NOTIFICATION_TIMEOUT_SECONDS": 10.0,
    "NOTIFICATION_REDIS_URL": "redis://127.0.0.1:6379/0",
    "NOTIFICATION_REDIS_CHANNEL": "vnext-notifications",
    # The egress policy of outgoing calls (HTTP tasks, remote domains, notification webhooks):
    # besides public addresses, these hosts (`name`, `name:port`, `*.suffix`; connected to
    # whatever they resolve to) and networks (`10.20.0.0/16`, `127.0.0.1/32`).
    "EGRESS_ALLOW_HOSTS": [],
    "EGRESS_ALLOW_CIDRS": [],
    # Named targets of task types 3, 1 and 2 (`instances.engine.targets`): a definition names
    # them, settings hold their addresses and credentials. Services by `appId` and HTTP
    # endpoints by `endpointName`: `{"customer-api": {"url": "https://...", "headers": {...},
    # "timeout": 10, "verify": True}}`. Output bindings by `bindingName`, of kind `webhook`
    # (`url`, `headers`, `timeout`) or `smtp` (`host`, `port`, `from`, `to`, `username`,
    # `password`, `starttls`, `ssl`, `timeout`).
    "SERVICES": {},
    "HTTP_ENDPOINTS": {},
    "BINDINGS": {},
    # The bearer token `/metrics` asks of its scraper; None: open.
    "METRICS_TOKEN": None,
    # What draws the admin's state diagrams: "graphviz" (its `dot`), "builtin" (a layered layout
    # in Python: nothing to install) or "auto", Graphviz when `dot` is installed, else builtin.
    "DIAGRAM_RENDERER": "auto",
    # How long the data, view and schema functions' answers are cached while their instance is
    # unchanged, unless the workflow sets `config.functionCache.ttlSeconds`; 0: not cached.
    "FUNCTION_CACHE_SECONDS": 60.0,
    # Fan-out items (task type 21) running at once in one process, across every batch; at
    # least 1 (checked at start-up: 0 would stall every batch at its first item).
    "FAN_OUT_MAX_CONCURRENT_ITEMS": 64,
    # Long-poll of the state function: the longest `?wait=` honoured, and how often a parked
    # request re-reads the instance besides the change notifications (a lost one costs this).
    "LONG_POLL_MAX_SECONDS": 60.0,
    "LONG_POLL_RECHECK_SECONDS": 5.0,
    # Rate limits (vnext/throttling.py; `<requests>/<s|m|h|d>`, None: none): starts per caller
    # and per workflow, long-polls per caller, publish requests per caller; and how many
    # long-polls one caller may have parked at once (None: no cap).
    "RATE_START_PER_CALLER": "200/s",
    "RATE_START_PER_WORKFLOW": "1000/s",
    "RATE_LONG_POLL_PER_CALLER": "200/s",
    "RATE_PUBLISH_PER_CALLER": "20/s",
    "MAX_PARKED_POLLS_PER_CALLER": 200,
    # Salt of the digests master-schema `x-encryption: hash` fields are shown as; None: one
    # derived from SECRET_KEY (stable per installation, unguessable without it).
    "SCHEMA_HASH_SALT": None,
    # Fernet keys of master-schema fields encrypted at rest (`x-encryption` `encrypt`): the
    # first seals, every one opens. Empty: none (settings derive one when DEBUG or on the
    # generated SECRET_KEY); publish then refuses a schema that encrypts a field.
    "ENCRYPTION_KEYS": [],
    # Request headers kept from scripts (`context.headers`) and job rows: case-insensitive shell
    # patterns; a list replaces these, None keeps them (Authorization, Proxy-Authorization,
    # Cookie and X-Api-Key are kept back whatever the list says).
    "HEADER_DENY_PATTERNS": list(DEFAULT_HEADER_DENY_PATTERNS),
    # How deep objects and arrays may nest in a request body (deeper: 400).
    "MAX_BODY_DEPTH": 64,
    # The claim of a JWT bearer token that lists the caller's roles (beside its groups).
    "JWT_ROLES_CLAIM": "roles",
    # How long an API token's user and a caller's grants are remembered in a shared cache
    # (vnext/credential_cache.py: retired at once on a change); 0 = never.
    "TOKEN_CACHE_SECONDS": 60.0,
    # The same in a process-local cache (locmem, the default), which other processes' changes
    # cannot retire: the bound on how long a revoked token or grant is still accepted there.
    "TOKEN_CACHE_LOCAL_SECONDS": 1.0,
    # HTTP worker processes of `make run`; None = one per CPU on PostgreSQL, one on SQLite.
    "HTTP_WORKERS": None,
    # Threads serving HTTP requests in `make run` (each keeps its database connection).
    "HTTP_THREADS": 8,
    # uvicorn's access log (one line per request): off by default, it costs throughput
    # (`make bench` serving suite); a proxy in front usually logs requests anyway.
    "HTTP_ACCESS_LOG": False,
    # The serving layer (vnext/serving.py): the largest request body read (413 past it), how
    # long the whole body may take to arrive (408), the largest request line and headers (431).
    # (Django's DATA_UPLOAD_MAX_MEMORY_SIZE follows MAX_BODY_BYTES.)
    "MAX_BODY_BYTES": 2_621_440,
    "BODY_READ_TIMEOUT_SECONDS": 30.0,
    "MAX_HEADER_BYTES": 64 * 1024,
    # Addresses of the proxies whose X-Forwarded-For / X-Forwarded-Proto uvicorn believes
    # (comma-separated IPs or CIDRs, `*` for any); empty: none, the peer's address is the client.
    "FORWARDED_ALLOW_IPS": "",
    # Folder of example workflows that `make run` imports.
    "EXAMPLES_DIR": None,
    # Jobs: "celery" or "embedded"; None picks celery when CELERY_BROKER_URL is set.
    "JOB_DISPATCH": None,
    # How long a claimed job is its worker's; past it another worker may take it over.
    "JOB_LEASE_SECONDS": 30.0,
    # The dispatch sweep hands a pending due job to the broker again once it has waited this
    # long since it was last handed over (its message may be lost).
    "JOB_REDISPATCH_SECONDS": 30.0,
    "JOB_MAX_ATTEMPTS": 5,
    "JOB_RETRY_BASE_SECONDS": 2.0,
    # Succeeded, cancelled and skipped jobs are pruned after this many days.
    "JOB_RETENTION_DAYS": 7.0,
    # Failed jobs and jobs that faulted their instance are pruned after this many days (kept
    # longer: an operator may still replay them or read why); None or 0 keeps them forever.
    "FAILED_JOB_RETENTION_DAYS": 90.0,
    # Completed instances are archived this many days after their completion, unless their
    # workflow's newest version sets `attributes.retentionDays`; None keeps them forever.
    "RETENTION_DAYS": None,
    # The folder archive files are written to (README "Retention and archive"); None:
    # `var/archive` under the project.
    "ARCHIVE_DIR": None,
    # Instances archived and deleted per transaction: each batch locks only its own rows.
    "ARCHIVE_BATCH_SIZE": 500,
    "ARCHIVE_YIELD_RATIO": 1.0,
    # The most instances one run of the periodic archive task archives.
    "ARCHIVE_RUN_LIMIT": 100_000,
    # An instance Busy longer than this with no live job is faulted by the reaper.
    "BUSY_LEASE_SECONDS": 300.0,
    # Worker threads of the embedded (in-process) job runner.
    "EMBEDDED_RUNNER_THREADS": 4,
    # From this many rows in the instance table (the planner's estimate), a listing that
    # filters or sorts on a data field no search index serves answers `X-VNext-Unindexed` and
    # logs its plan's cost (README "Search indexes").
    "UNINDEXED_WARN_ROWS": 100_000,
    # The most rows a listing's `page` may skip (OFFSET); deeper pages are read by cursor.
    "MAX_PAGE_OFFSET": 10_000,
    # Batch operations: the most instances one batch may freeze, and how many items one run of
    # its job handles before it hands the rest to the next run (other jobs get a turn).
    "BATCH_MAX_ITEMS": 100_000,
    "BATCH_CHUNK": 200,
    # Event intake from a broker (`manage.py events_consume`, README "Events from a broker"):
    # the routes, each `{"source": "rabbitmq" | "redis", "queue" (or "stream"), "domain",
    # "workflow", "action": "start" | "transition", "transitionKey", "type" (only CloudEvents
    # of this type; absent: any), "unmatched", "name" (for metrics)}`, and the brokers.
    "EVENT_ROUTES": [],
    "EVENT_RABBITMQ_URL": "amqp://guest:guest@127.0.0.1:5672//",
    "EVENT_REDIS_URL": "redis://127.0.0.1:6379/0",
    # Messages each consumer holds unacknowledged (AMQP basic_qos, XREADGROUP COUNT), and
    # consumer threads per queue or stream (1 keeps the queue's order).
    "EVENT_PREFETCH": 10,
    "EVENT_CONCURRENCY": 1,
    # An event that may apply later (matched no instance yet, its mapping timed out) is tried
    # this many times, then dead-lettered; the first wait, doubled per attempt up to the most
    # (RabbitMQ; on Redis a retry waits EVENT_REDIS_CLAIM_IDLE_SECONDS). Transient failures
    # (database or script pool down) wait the same way, as often as it takes.
    "EVENT_MAX_ATTEMPTS": 5,
    "EVENT_RETRY_SECONDS": 1.0,
    "EVENT_RETRY_MAX_SECONDS": 60.0,
    # What an event that matched no instance does, unless its route says: "retry" (later, see
    # above), "dead-letter" (at once) or "ack" (dropped, as `POST .../events` answers 200).
    "EVENT_UNMATCHED": "retry",
    # Redis Streams: the consumer group, and how long an entry stays pending before another
    # consumer takes it over (its reader died; or a retry's wait).
    "EVENT_REDIS_GROUP": "vnext",
    "EVENT_REDIS_CLAIM_IDLE_SECONDS": 30.0,
    # The port `events_consume` serves its Prometheus metrics on; None: not served.
    "EVENT_METRICS_PORT": None,
    # Outbound instance events (instances/outbox.py; the relay: `make relay`). Which workflows
    # publish which events where: keys "<domain>/<workflow>", "<domain>/*" or "*" (the most
    # specific key wins; an empty list turns a workflow off under a "*"), each a list of
    # {"target": <a name in OUTBOX_TARGETS>, "types": [...]}, types as kinds ("state-entered"),
    # full types ("io.vnext.instance.completed") or patterns ("*", "incident-*"). A workflow no
    # key names writes no outbox row and pays no statement for it. E.g.
    # {"core/loan-application": [{"target": "bus", "types": ["*"]}],
    #  "*": [{"target": "audit", "types": ["completed", "faulted"]}]}
    "OUTBOX_SUBSCRIPTIONS": {},
    # The brokers the relay publishes to, by name. RabbitMQ (kombu; persistent messages,
    # publisher confirms, structured-mode CloudEvents):
    # {"broker": "rabbitmq", "url": "amqp://guest:guest@127.0.0.1:5672//",
    #  "exchange": "vnext.events", "exchange_type": "topic",
    #  "routing_key": "{domain}.{workflow}.{kind}"}; Redis Streams (XADD, field `data` the
    # structured CloudEvent, trimmed to about `maxlen` entries):
    # {"broker": "redis", "url": "redis://127.0.0.1:6379/0", "stream": "vnext.events",
    #  "maxlen": 100000}.
    "OUTBOX_TARGETS": {},
    # The relay: rows per batch, how often an idle relay looks for new rows (a standby relay
    # for the lock), and how long published rows are kept (0: deleted once published).
    "OUTBOX_BATCH_SIZE": 500,
    "OUTBOX_POLL_SECONDS": 0.2,
    "OUTBOX_RETENTION_HOURS": 24.0,
    # The pub/sub task's (type 4) targets by the names definitions give as `pubSubName`:
    # {"kind": "rabbitmq", "url": "amqp://...", "exchange": "orders", "exchange_type": "topic"}
    # (the topic is the routing key) or {"kind": "redis-streams", "url": "redis://...",
    # "maxlen": 10000} (the topic is the stream); `timeout_seconds` (5) bounds a publish.
    "PUBSUB_TARGETS": {},
    # The state stores of the state-store and cache-aside tasks (17, 18) by `storeName`:
    # {"kind": "redis", "url": "redis://...", "prefix": "vnext:state:", "timeout_seconds": 5},
    # and the store of a task that names none.
    "STATE_STORES": {},
    "DEFAULT_STATE_STORE": "statestore",
}


def script_pool_settings() -> PoolSettings:
    """The script worker pool's settings, from `VNEXT`."""
    workers = vnext_setting("SCRIPT_WORKERS")
    return PoolSettings(
        size=int(workers) if workers else PoolSettings().size,
        memory_mb=int(vnext_setting("SCRIPT_MEMORY_MB")),
        user=vnext_setting("SCRIPT_WORKER_USER") or None,
        max_payload_bytes=int(vnext_setting("SCRIPT_MAX_PAYLOAD_BYTES")),
        wait_seconds=float(vnext_setting("SCRIPT_POOL_WAIT_SECONDS")),
    )


def schema_hash_salt() -> str:
    """`SCHEMA_HASH_SALT`, or one derived from `SECRET_KEY`."""
    salt = vnext_setting("SCHEMA_HASH_SALT")
    if salt:
        return str(salt)
    return hashlib.sha256(f"vnext-schema-hash:{settings.SECRET_KEY}".encode()).hexdigest()[:32]


def vnext_setting(name: str) -> Any:
    """Return `settings.VNEXT[name]`, falling back to the documented default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown VNEXT setting {name!r}")
    return getattr(settings, "VNEXT", {}).get(name, DEFAULTS[name])


def header_deny_list() -> HeaderDenyList:
    """The request headers scripts and job rows never get (`HEADER_DENY_PATTERNS`)."""
    patterns = vnext_setting("HEADER_DENY_PATTERNS")
    if patterns is None:
        return HeaderDenyList.default()
    return _header_deny_list(tuple(str(p) for p in patterns))


@lru_cache(maxsize=8)
def _header_deny_list(patterns: tuple[str, ...]) -> HeaderDenyList:
    return HeaderDenyList(patterns)


def egress_policy() -> EgressPolicy:
    """The egress policy from `EGRESS_ALLOW_HOSTS` and `EGRESS_ALLOW_CIDRS` (read at every
    connect, so a settings override applies at once); a malformed CIDR raises `ValueError`."""
    hosts = tuple(str(h) for h in vnext_setting("EGRESS_ALLOW_HOSTS") or ())
    cidrs = tuple(str(c) for c in vnext_setting("EGRESS_ALLOW_CIDRS") or ())
    return _egress_policy(hosts, cidrs)


@lru_cache(maxsize=8)
def _egress_policy(hosts: tuple[str, ...], cidrs: tuple[str, ...]) -> EgressPolicy:
    return EgressPolicy.from_settings(hosts, cidrs)


def named_targets() -> NamedTargets:
    """The named services, HTTP endpoints and bindings of settings (read at every call, so a
    settings override applies at once); entries that cannot be used carry their problem."""
    return NamedTargets.from_settings(
        vnext_setting("SERVICES"), vnext_setting("HTTP_ENDPOINTS"), vnext_setting("BINDINGS")
    )


def notification_secret() -> str:
    """The key webhook notifications are signed with: `VNEXT["NOTIFICATION_SECRET"]`, else one
    derived from SECRET_KEY (stable per installation)."""
    configured = vnext_setting("NOTIFICATION_SECRET")
    if configured:
        return str(configured)
    return hashlib.sha256(f"vnext-notifications:{settings.SECRET_KEY}".encode()).hexdigest()


def remote_base_url(domain: str) -> str | None:
    """The API base (`https://host/api/v1`) of the runtime `REMOTE_DOMAINS` routes `domain` to,
    or None when this runtime serves it."""
    url = (vnext_setting("REMOTE_DOMAINS") or {}).get(domain)
    return str(url).rstrip("/") if url else None
