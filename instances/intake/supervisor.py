"""Runs the intake's consumers: `concurrency` threads per routed queue or stream, each with its
own broker connection and its own database connection, until a stop is asked for.

With one thread a queue's events are delivered in the queue's order; more threads compete for
the same queue (throughput, and no order between the messages they hold at once). More
processes (`events_consume` run again, each Redis consumer under its own name) do the same."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connections

from instances.intake.rabbitmq import RabbitConsumer
from instances.intake.redis_streams import StreamConsumer
from instances.intake.routes import RABBITMQ, EventRoute, addresses
from vnext.conf import vnext_setting

logger = logging.getLogger("vnext.intake")


@dataclass(frozen=True)
class IntakeOptions:
    """How the consumers run: messages in flight per consumer, threads per queue, the Redis
    consumer name's stem (`<name>-<n>`), and the broker URLs."""

    prefetch: int
    concurrency: int
    consumer_name: str
    rabbitmq_url: str
    redis_url: str

    @classmethod
    def from_settings(
        cls,
        *,
        prefetch: int | None = None,
        concurrency: int | None = None,
        consumer_name: str | None = None,
    ) -> IntakeOptions:
        """The settings (`EVENT_*`), with what the command line says instead."""
        return cls(
            prefetch=max(int(prefetch or vnext_setting("EVENT_PREFETCH")), 1),
            concurrency=max(int(concurrency or vnext_setting("EVENT_CONCURRENCY")), 1),
            consumer_name=consumer_name or socket.gethostname(),
            rabbitmq_url=str(vnext_setting("EVENT_RABBITMQ_URL")),
            redis_url=str(vnext_setting("EVENT_REDIS_URL")),
        )


def consumers_make(
    routes: Sequence[EventRoute], options: IntakeOptions, stop: threading.Event
) -> list[tuple[str, Callable[[], None]]]:
    """Each consumer's name and its `run`: `concurrency` per routed queue or stream."""
    made: list[tuple[str, Callable[[], None]]] = []
    for source, address in addresses(routes):
        for index in range(options.concurrency):
            name = f"{source}:{address}#{index}"
            if source == RABBITMQ:
                made.append(
                    (
                        name,
                        RabbitConsumer(
                            url=options.rabbitmq_url,
                            queue=address,
                            routes=routes,
                            prefetch=options.prefetch,
                            stop=stop,
                        ).run,
                    )
                )
            else:
                made.append(
                    (
                        name,
                        StreamConsumer(
                            url=options.redis_url,
                            stream=address,
                            routes=routes,
                            prefetch=options.prefetch,
                            stop=stop,
                            group=str(vnext_setting("EVENT_REDIS_GROUP")),
                            name=f"{options.consumer_name}-{index}",
                            claim_idle_seconds=float(
                                vnext_setting("EVENT_REDIS_CLAIM_IDLE_SECONDS")
                            ),
                        ).run,
                    )
                )
    return made


def intake_run(routes: Sequence[EventRoute], options: IntakeOptions, stop: threading.Event) -> bool:
    """Run every consumer until `stop` is set; each finishes its message in hand, acknowledges
    it and closes. False when a consumer failed for good (then the others are stopped too)."""
    failed = threading.Event()

    def guarded(name: str, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception:
            logger.exception("consumer %s failed; stopping the intake", name)
            failed.set()
            stop.set()
        finally:
            connections.close_all()  # this thread's database connection

    threads = [
        threading.Thread(target=guarded, args=(name, run), name=name, daemon=True)
        for name, run in consumers_make(routes, options, stop)
    ]
    for thread in threads:
        thread.start()
    # Polled: the signal handlers run on this thread, between its waits.
    while not stop.wait(0.5):
        pass
    for thread in threads:
        thread.join()
    return not failed.is_set()
