"""`manage.py events_consume`: consume CloudEvents from RabbitMQ and Redis Streams into
instances, as `VNEXT["EVENT_ROUTES"]` routes them (README "Events from a broker")."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client import start_http_server

from instances.intake.routes import SOURCES, event_routes
from instances.intake.supervisor import IntakeOptions, intake_run
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.intake")


class Command(BaseCommand):
    """Consume broker events until SIGTERM or SIGINT (a second one quits at once)."""

    help = (
        "Consume CloudEvents from the queues and streams VNEXT['EVENT_ROUTES'] names; each is "
        "acknowledged after its work committed. SIGTERM/SIGINT: finish the message in hand, stop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", choices=SOURCES, help="only this broker's routes")
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            help="only this queue or stream (repeat for more)",
        )
        parser.add_argument("--prefetch", type=int, help="messages in flight per consumer")
        parser.add_argument("--concurrency", type=int, help="consumer threads per queue or stream")
        parser.add_argument(
            "--consumer-name",
            help="Redis consumer name stem (default: the host name); one per process",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve Prometheus metrics on this port (default VNEXT_EVENT_METRICS_PORT; none)",
        )
        parser.add_argument("--metrics-addr", default="0.0.0.0", help="the metrics listen address")

    def handle(self, *args: Any, **options: Any) -> None:
        routes = [
            route
            for route in event_routes()
            if (not options["source"] or route.source == options["source"])
            and (not options["queue"] or route.address in options["queue"])
        ]
        if not routes:
            raise CommandError(
                "no event route to consume (VNEXT['EVENT_ROUTES'], --source, --queue)"
            )
        intake = IntakeOptions.from_settings(
            prefetch=options["prefetch"],
            concurrency=options["concurrency"],
            consumer_name=options["consumer_name"],
        )
        port = options["metrics_port"] or vnext_setting("EVENT_METRICS_PORT")
        if port:
            start_http_server(int(port), addr=options["metrics_addr"])
        stop = threading.Event()

        def stop_asked(signum: int, _frame: FrameType | None) -> None:
            if stop.is_set():
                os._exit(128 + signum)  # asked twice: no more waiting for the message in hand
            logger.info("%s: stopping after the messages in hand", signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, stop_asked)
        signal.signal(signal.SIGINT, stop_asked)
        names = ", ".join(f"{r.source}:{r.address} -> {r.label}" for r in routes)
        logger.info("events_consume: %s", names)
        self.stdout.write(f"consuming: {names}")
        self.stdout.flush()
        if not intake_run(routes, intake, stop):
            raise CommandError("a consumer failed (see the log)")
        self.stdout.write("stopped")
