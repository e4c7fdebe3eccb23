"""The service credential of the internal subflow relay: the `relay_subflow` permission and the
`relay-services` group that holds it (a service account is made a member)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "relay-services"


def create_group(apps: Any, schema_editor: Any) -> None:
    # Permissions are normally created after the last migration; the group needs this one now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)
    group.permissions.add(
        apps.get_model("auth", "Permission").objects.get(
            content_type__app_label="instances", codename="relay_subflow"
        )
    )


def delete_group(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [("instances", "0008_transition_diverted")]

    operations = [
        migrations.AlterModelOptions(
            name="instance",
            options={
                "permissions": [
                    (
                        "relay_subflow",
                        "Relay a transition to a reserved subflow (service credential)",
                    )
                ]
            },
        ),
        migrations.RunPython(create_group, delete_group),
    ]
