"""The SpiffWorkflow baseline's rows (tables made by `bench.bench_order`, no migrations)."""

from __future__ import annotations

from django.db import models


class SpiffOrder(models.Model):
    """One `order` workflow: its JSON-serialized SpiffWorkflow instance, rewritten every step,
    and the task it waits on (`done` once the workflow completed)."""

    waiting_on = models.CharField(max_length=50)
    serialization = models.TextField()

    class Meta:
        app_label = "order_peers"
        db_table = "bench_spiff_order"

    def __str__(self) -> str:
        return f"spiff order {self.pk} (waiting on {self.waiting_on})"


class SpiffOrderHistory(models.Model):
    """One row per step (the start included): the task completed, by whom, when."""

    order = models.ForeignKey(SpiffOrder, on_delete=models.CASCADE)
    task = models.CharField(max_length=50)
    actor = models.CharField(max_length=50)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "order_peers"
        db_table = "bench_spiff_history"

    def __str__(self) -> str:
        return f"{self.task} by {self.actor}"
