"""The django-fsm-2 baseline's models (tables made by `bench.bench_transitions`, no migrations)."""

from __future__ import annotations

from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition


class FsmOrder(ConcurrentTransitionMixin, models.Model):
    """An order that goes ping -> pong -> ping; saving checks the state it was loaded in."""

    state = FSMField(default="ping")

    class Meta:
        app_label = "fsm_library"
        db_table = "bench_fsmlib_order"

    def __str__(self) -> str:
        return f"order {self.pk} ({self.state})"

    @transition(field=state, source="ping", target="pong")
    def to_pong(self) -> None:
        """ping -> pong."""

    @transition(field=state, source="pong", target="ping")
    def to_ping(self) -> None:
        """pong -> ping."""


class FsmOrderHistory(models.Model):
    """One row per transition, as the engine writes one history row."""

    order = models.ForeignKey(FsmOrder, on_delete=models.CASCADE)
    from_state = models.CharField(max_length=20)
    to_state = models.CharField(max_length=20)
    actor = models.CharField(max_length=50)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "fsm_library"
        db_table = "bench_fsmlib_history"

    def __str__(self) -> str:
        return f"{self.from_state} -> {self.to_state} by {self.actor}"
