"""`manage.py outbox_relay`: publish the outbox's pending instance events to their brokers
(instances/outbox_relay.py) until SIGTERM or SIGINT; `--prune` deletes the published rows past
their retention and exits."""

from __future__ import annotations

import logging
import signal
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.outbox_relay import Relay, outbox_prune
from vnext.conf import vnext_setting


class Command(BaseCommand):
    """Run the outbox relay."""

    help = (
        "Publish pending outbox events (VNEXT_OUTBOX_TARGETS) to RabbitMQ or Redis Streams, in "
        "per-instance order, at least once; one relay per target is active (a PostgreSQL "
        "advisory lock), others stand by. SIGTERM stops it after the batch under way."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--target", action="append", help="a target of OUTBOX_TARGETS (default: all)"
        )
        parser.add_argument(
            "--prune",
            action="store_true",
            help="delete events published over VNEXT_OUTBOX_RETENTION_HOURS ago, then exit",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=0,
            help="serve the relay's Prometheus metrics on this port (0: none)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        if options["prune"]:
            hours = float(vnext_setting("OUTBOX_RETENTION_HOURS"))
            pruned = outbox_prune(retention=timedelta(hours=hours))
            self.stdout.write(f"{pruned} published outbox event(s) pruned")
            return
        try:
            relay = Relay.from_settings(options["target"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if not relay.targets:
            raise CommandError("no outbox target configured (VNEXT_OUTBOX_TARGETS)")
        if options["metrics_port"]:
            from prometheus_client import start_http_server

            start_http_server(options["metrics_port"])

        def stop(signum: int, frame: Any) -> None:
            relay.stop.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"outbox relay: {', '.join(relay.targets)}", ending="\n")
        self.stdout.flush()
        relay.run()
        self.stdout.write("outbox relay stopped")
