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


class FsmWorkflowOrder(ConcurrentTransitionMixin, models.Model):
    """The `order` suite's workflow: new -> submitted (writes `amount`) -> approved (writes
    `decision`), as a django-fsm-2 user writes it: the data are columns of the model."""

    state = FSMField(default="new")
    amount = models.IntegerField(null=True)
    decision = models.CharField(max_length=20, blank=True)

    class Meta:
        app_label = "fsm_library"
        db_table = "bench_fsmlib_wf_order"

    def __str__(self) -> str:
        return f"order {self.pk} ({self.state})"

    @transition(field=state, source="new", target="submitted")
    def submit(self, amount: int) -> None:
        """new -> submitted, with the amount the client sent."""
        self.amount = amount

    @transition(field=state, source="submitted", target="approved")
    def approve(self, decision: str) -> None:
        """submitted -> approved (final), with the decision."""
        self.decision = decision


class FsmWorkflowOrderLog(models.Model):
    """One row per transition, the columns django-fsm-log's `StateLog` keeps (it logs
    transitions only: creating the order writes no row)."""

    order = models.ForeignKey(FsmWorkflowOrder, on_delete=models.CASCADE)
    transition = models.CharField(max_length=50)
    source_state = models.CharField(max_length=20)
    state = models.CharField(max_length=20)
    by = models.CharField(max_length=50)
    timestamp = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "fsm_library"
        db_table = "bench_fsmlib_wf_log"

    def __str__(self) -> str:
        return f"{self.source_state} -> {self.state} by {self.by}"
