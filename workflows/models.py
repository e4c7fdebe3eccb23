"""The component registry: every published definition (workflow, task, schema, ...), immutable."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from workflows.documents import ComponentKind, ComponentRef


class Component(models.Model):
    """One published version of a component. Rows are inserted once and never changed."""

    kind = models.CharField(max_length=16, choices=ComponentKind.choices)
    domain = models.CharField(max_length=100)
    key = models.CharField(max_length=200)
    version = models.CharField(max_length=64)
    version_major = models.PositiveIntegerField()
    version_minor = models.PositiveIntegerField()
    version_patch = models.PositiveIntegerField()
    # A release sorts after its pre-releases: 1.0.0-beta.1 < 1.0.0.
    version_is_release = models.BooleanField()
    version_prerelease = models.CharField(max_length=64, blank=True)
    flow = models.CharField(max_length=100)
    flow_version = models.CharField(max_length=64, blank=True)
    tags = models.JSONField(default=list, blank=True)
    document = models.JSONField()
    content_hash = models.CharField(max_length=64)
    published_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "domain", "key", "version"], name="component_unique_version"
            ),
        ]
        indexes = [
            models.Index(
                fields=[
                    "kind",
                    "domain",
                    "key",
                    "-version_major",
                    "-version_minor",
                    "-version_patch",
                    "-version_is_release",
                ],
                name="component_latest_idx",
            ),
        ]
        ordering = ["kind", "domain", "key", "-version_major", "-version_minor", "-version_patch"]

    def __str__(self) -> str:
        return str(self.ref)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Insert only: a published version is immutable."""
        if not self._state.adding:
            raise ValueError(f"{self} is published and immutable; publish a new version instead")
        super().save(*args, **kwargs)

    @property
    def ref(self) -> ComponentRef:
        """The component's identity."""
        return ComponentRef(self.kind, self.domain, self.key, self.version)


class WorkflowGrant(models.Model):
    """What the members of a group may do with a domain's workflows, or with one workflow.

    The API checks these on every endpoint (superusers hold every right). The workflow's own
    `queryRoles` and transition `roles` apply on top: a grant opens the door to the workflow,
    the definition decides what happens inside it.
    """

    group = models.ForeignKey(
        "auth.Group", on_delete=models.CASCADE, related_name="workflow_grants"
    )
    domain = models.CharField(max_length=100)
    workflow = models.CharField(
        max_length=200, blank=True, help_text="Blank: every workflow of the domain."
    )
    read_definitions = models.BooleanField(
        default=False,
        help_text="Read the workflow's definitions (and, domain-wide, its tasks, "
        "schemas, views...).",
    )
    read_instances = models.BooleanField(
        default=False, help_text="Get and list instances, their history, incidents and functions."
    )
    start_instances = models.BooleanField(default=False, help_text="Start instances.")
    drive_instances = models.BooleanField(
        default=False, help_text="Run transitions, retry, acknowledge long-polls."
    )
    operate_instances = models.BooleanField(
        default=False,
        help_text="Operator-level: migrate instances to another version and run batch "
        "operations (retry, cancel, suspend, resume, migrate) over a filter.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "domain", "workflow"], name="workflow_grant_unique"
            ),
        ]
        ordering = ["domain", "workflow", "group__name"]

    def __str__(self) -> str:
        return f"{self.group} on {self.domain}/{self.workflow or '*'}"


class DomainReach(models.Model):
    """A workflow allowed to read or trigger instances of another domain from its tasks
    (types 11-15, 19); without one, those tasks stay in the workflow's own domain."""

    domain = models.CharField(max_length=100)
    workflow = models.CharField(
        max_length=200, blank=True, help_text="Blank: every workflow of the domain."
    )
    target_domain = models.CharField(max_length=100)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "workflow", "target_domain"], name="domain_reach_unique"
            ),
        ]
        verbose_name_plural = "domain reaches"

    def __str__(self) -> str:
        return f"{self.domain}/{self.workflow or '*'} -> {self.target_domain}"
