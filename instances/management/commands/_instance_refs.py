"""How the operators' commands name instances: `--id` takes a UUID or a business key."""

from __future__ import annotations

import uuid

from django.core.management.base import CommandError
from django.db.models import BooleanField, ExpressionWrapper, Q

from instances.models import Instance
from instances.status import InstanceStatus

# Exit code of a selection that names no instance, or a business key several workflows share
# (argparse's own code for a usage error: the command line must say more).
AMBIGUOUS = 2


def instance_id_of(ref: str, *, domain: str | None, workflow: str | None) -> uuid.UUID:
    """The instance `--id` names: a UUID as it is, else a business key resolved as the API
    resolves `{instance}` (the live instance first, then the newest), within --domain and
    --workflow when given. A key found in several workflows is refused, never guessed."""
    try:
        return uuid.UUID(ref)
    except ValueError:
        pass
    # The business-key index (`instance_business_key`: key first) serves this at any size.
    found = Instance.objects.filter(key=ref)
    if domain:
        found = found.filter(domain=domain)
    if workflow:
        found = found.filter(workflow_key=workflow)
    rows = list(
        found.order_by(
            ExpressionWrapper(Q(status=InstanceStatus.COMPLETED), output_field=BooleanField()),
            "-created_at",
        ).values_list("id", "domain", "workflow_key")[:50]
    )
    scope = "".join(
        f" {name} {value}" for name, value in (("in", domain), ("of", workflow)) if value
    )
    if not rows:
        raise CommandError(f"no instance with id or business key {ref!r}{scope}", returncode=1)
    workflows = sorted({(row[1], row[2]) for row in rows})
    if len(workflows) > 1:
        named = ", ".join(f"{d}/{w}" for d, w in workflows)
        raise CommandError(
            f"business key {ref!r} names instances of several workflows ({named}): "
            "add --workflow (and --domain) or pass the instance UUID",
            returncode=AMBIGUOUS,
        )
    return rows[0][0]
