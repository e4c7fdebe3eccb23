"""The `operators` group: may retry, cancel and resolve instances, replay jobs, force-release
locks, and read the audit trail. Staff with view permissions only see no operator actions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "operators"
PERMISSIONS = [
    ("instances", "view_instance"),
    ("instances", "change_instance"),
    ("instances", "view_incident"),
    ("instances", "change_incident"),
    ("instances", "view_job"),
    ("instances", "change_job"),
    ("instances", "view_operatoraction"),
    ("instances", "view_instancetransition"),
    ("instances", "view_instancetask"),
    ("locks", "view_resourcelock"),
    ("locks", "change_resourcelock"),
]


def create_group(apps: Any, schema_editor: Any) -> None:
    # Permissions are normally created after the last migration; the group needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    group, _ = group_model.objects.get_or_create(name=GROUP)
    for app_label, codename in PERMISSIONS:
        group.permissions.add(
            permission_model.objects.get(content_type__app_label=app_label, codename=codename)
        )


def delete_group(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("locks", "0001_initial"),
        ("instances", "0006_operator_action"),
    ]

    operations = [migrations.RunPython(create_group, delete_group)]
