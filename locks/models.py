"""Business resource locks (seed 003): one row per held key, owned by an instance, with a TTL."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ResourceLock(models.Model):
    """A held lock. Acquired by one INSERT ... ON CONFLICT statement (see `locks.store`)."""

    key = models.CharField(max_length=512, unique=True)
    # The owning instance's id. Not a foreign key: a start transition acquires before its
    # instance row exists.
    owner = models.UUIDField(db_index=True)
    transition_key = models.CharField(max_length=200, blank=True)
    acquired_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["expires_at"]

    def __str__(self) -> str:
        return f"{self.key} (owner {self.owner}, until {self.expires_at:%Y-%m-%d %H:%M:%S})"

    @property
    def is_expired(self) -> bool:
        """True once the TTL has passed: anyone may take the key over."""
        return self.expires_at <= timezone.now()
