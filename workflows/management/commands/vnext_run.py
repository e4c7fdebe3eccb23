"""`manage.py vnext_run`: the server behind `make run` and `make serve`.

`make run` migrates, imports `examples/`, makes sure an operator account exists, then serves HTTP
and Channels on 127.0.0.1:$PORT until Ctrl-C / SIGTERM. `make serve` (`--serve-only`) serves the
same way and does nothing else: production migrates as a release step (`make migrate`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any

import uvicorn
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from rest_framework.authtoken.models import Token

from instances.engine.script_pool import script_pool
from instances.job_dispatch import dispatch_mode
from instances.runner import start_embedded_runner, stop_embedded_runner
from vnext.conf import vnext_setting


class Command(BaseCommand):
    """Prepare the database and serve the platform (uvicorn, ASGI: HTTP + Channels)."""

    help = "Run the embedded vNext server: migrate, import examples, operator account, serve."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-examples", action="store_true", help="skip importing examples")
        parser.add_argument(
            "--prepare-only", action="store_true", help="migrate, import, create the operator"
        )
        parser.add_argument(
            "--serve-only",
            action="store_true",
            help="production (`make serve`): serve only; no migrate, examples or operator account",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["serve_only"]:
            self._start_script_workers()
            self._serve(options["host"], options["port"])
            return
        if not options["prepare_only"]:
            self._start_script_workers()
        self._prepare_database_folder()
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        if not options["no_examples"]:
            self._import_examples()
        self._ensure_operator()
        if options["prepare_only"]:
            return
        self._serve(options["host"], options["port"])

    def _start_script_workers(self) -> None:
        # Before any socket is opened: the workers are separate clean interpreters either way,
        # but a pool that cannot start should stop the server here, not fail its first request.
        pool = script_pool()
        protections = pool.protections()
        self.stdout.write(
            f"{pool.size} script workers started (user {protections.get('uid')}, "
            f"{protections.get('address_space_bytes', 0) // 2**20} MiB, "
            f"seccomp: {protections.get('seccomp')})"
        )

    def _prepare_database_folder(self) -> None:
        database = settings.DATABASES["default"]
        if database["ENGINE"].endswith("sqlite3"):
            Path(str(database["NAME"])).parent.mkdir(parents=True, exist_ok=True)

    def _import_examples(self) -> None:
        examples = vnext_setting("EXAMPLES_DIR")
        if not examples or not Path(examples).is_dir():
            return
        try:
            call_command("import_components", str(examples), no_progress=True, verbosity=0)
        except CommandError as exc:
            self.stderr.write(self.style.WARNING(f"some examples were rejected: {exc}"))
        self.stdout.write(f"examples imported from {examples}")

    def _ensure_operator(self) -> None:
        user_model = get_user_model()
        username = os.environ.get("VNEXT_OPERATOR_USERNAME", "operator")
        password = os.environ.get("VNEXT_OPERATOR_PASSWORD", "")
        user = user_model.objects.filter(username=username).first()
        if user is not None and not password:
            self.stdout.write(f"operator account: {username} (existing; password unchanged)")
            return
        generated = not password
        password = password or secrets.token_urlsafe(12)
        if user is None:
            user = user_model.objects.create_superuser(username=username, password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        token, _ = Token.objects.get_or_create(user=user)
        shown = password if generated else "(from VNEXT_OPERATOR_PASSWORD)"
        self.stdout.write(
            self.style.SUCCESS(
                f"operator account: {username} / {shown}\n"
                f"API token:        {token.key}  (header: Authorization: Token <key>)"
            )
        )

    def _serve(self, host: str, port: int) -> None:
        self.stdout.write(
            self.style.SUCCESS(
                f"serving http://{host}:{port}/  admin: /admin/  API docs: /api/docs/  "
                "(Ctrl-C to stop)"
            )
        )
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the handler
        # that was installed before it: make that a clean exit (status 0), not a kill.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _exit_cleanly)
        _keep_connections()
        workers = http_workers()
        embedded = dispatch_mode() == "embedded"
        if workers > 1:
            # Each worker process runs its own job runner (claims are compare-and-set, so they
            # share the queue safely) and its own script pool; this process only supervises.
            os.environ[EMBEDDED_RUNNER_IN_WORKERS] = "1" if embedded else ""
            self.stdout.write(f"{workers} HTTP worker processes")
            self.stdout.write(f"metrics of every worker process in {_metrics_directory(port)}")
        elif embedded:
            start_embedded_runner()
        if embedded:
            self.stdout.write("embedded job runner started (no broker)")
        try:
            uvicorn.run(
                "vnext.asgi:application",
                host=host,
                port=port,
                log_level="info",
                lifespan="off",
                workers=workers,
                access_log=bool(vnext_setting("HTTP_ACCESS_LOG")),
                **hardened_options(),
            )
        finally:
            if embedded and workers == 1:
                stop_embedded_runner()


def hardened_options() -> dict[str, Any]:
    """uvicorn's options for hostile clients: httptools with a limit on the request head
    (`VNEXT_MAX_HEADER_BYTES`), and X-Forwarded-For believed only from the proxies
    `FORWARDED_ALLOW_IPS` names (uvicorn's default believes loopback: any local client)."""
    forwarded_allow_ips = str(vnext_setting("FORWARDED_ALLOW_IPS") or "")
    return {
        "http": "vnext.http_protocol:HeaderLimitedHttpToolsProtocol",
        "proxy_headers": bool(forwarded_allow_ips),
        # None would make uvicorn read FORWARDED_ALLOW_IPS itself, the same variable.
        "forwarded_allow_ips": forwarded_allow_ips or None,
    }


def _metrics_directory(port: int) -> str:
    """Where the worker processes write their metrics, so that `/metrics` on any of them adds
    them all up (prometheus-client's multiprocess mode): `PROMETHEUS_MULTIPROC_DIR` when the
    operator set one (shared with Celery workers on the host, say), else `var/prometheus-<port>`,
    emptied at start (what a previous run counted is gone with its processes)."""
    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if configured:
        Path(configured).mkdir(parents=True, exist_ok=True)
        return configured
    directory = Path(settings.BASE_DIR) / "var" / f"prometheus-{port}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    # The workers are new interpreters: they read it from the environment before they import
    # prometheus-client.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return str(directory)


# Set for the worker processes of a multi-process server: each starts an embedded job runner.
EMBEDDED_RUNNER_IN_WORKERS = "VNEXT_EMBEDDED_RUNNER_IN_WORKERS"


def http_workers() -> int:
    """HTTP worker processes: `VNEXT_HTTP_WORKERS`, else one per CPU on PostgreSQL and one on
    SQLite (one writer at a time: more processes would only wait for each other)."""
    configured = vnext_setting("HTTP_WORKERS")
    if configured:
        return max(int(configured), 1)
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return os.cpu_count() or 1
    return 1


# How long an HTTP thread keeps its PostgreSQL connection when no pool is configured.
PERSISTENT_CONNECTION_SECONDS = 300


def _keep_connections() -> None:
    """PostgreSQL without a pool (`DATABASE_POOL_MAX_SIZE`) and without `DATABASE_CONN_MAX_AGE`:
    let each HTTP thread keep its connection, checked before reuse, instead of opening one per
    request (about 15 ms each)."""
    database = connections.settings["default"]
    pooled = "pool" in (database.get("OPTIONS") or {})
    if database["ENGINE"].endswith("postgresql") and not pooled and not database["CONN_MAX_AGE"]:
        database["CONN_MAX_AGE"] = PERSISTENT_CONNECTION_SECONDS
        database["CONN_HEALTH_CHECKS"] = True
        # Worker processes read their settings afresh: the same through the environment.
        os.environ["DATABASE_CONN_MAX_AGE"] = str(PERSISTENT_CONNECTION_SECONDS)
        os.environ["DATABASE_CONN_HEALTH_CHECKS"] = "true"


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)
