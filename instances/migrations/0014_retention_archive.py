"""Retention and archive: the tombstone table of archived instances, the index the archive finds
its candidates with (built CONCURRENTLY on PostgreSQL: a big instance table keeps taking writes
while it builds), the audited `restore` action, and the periodic archive task for
django-celery-beat."""

import django.utils.timezone
from django.db import migrations, models

ARCHIVABLE = models.Index(
    condition=models.Q(status="C"),
    fields=["domain", "workflow_key", "completed_at"],
    name="instance_archivable",
)

SWEEPS = [("vnext: archive completed instances", "vnext.instances_archive", 3600)]


def add_archivable_index(apps, schema_editor):
    model = apps.get_model("instances", "Instance")
    if schema_editor.connection.vendor == "postgresql":
        sql = str(ARCHIVABLE.create_sql(model, schema_editor, concurrently=True))
        schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
    else:
        schema_editor.add_index(model, ARCHIVABLE)


def drop_archivable_index(apps, schema_editor):
    model = apps.get_model("instances", "Instance")
    schema_editor.remove_index(model, ARCHIVABLE)


def register(apps, schema_editor):
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, seconds in SWEEPS:
        every, _ = interval_model.objects.get_or_create(every=seconds, period="seconds")
        task_model.objects.update_or_create(
            name=name, defaults={"task": task, "interval": every, "enabled": True}
        )


def unregister(apps, schema_editor):
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    task_model.objects.filter(name__in=[name for name, _, _ in SWEEPS]).delete()


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("instances", "0013_counts_business_key"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.CreateModel(
            name="ArchivedInstance",
            fields=[
                ("instance_id", models.UUIDField(primary_key=True, serialize=False)),
                ("domain", models.CharField(max_length=100)),
                ("workflow_key", models.CharField(max_length=200)),
                ("key", models.CharField(blank=True, max_length=100, null=True)),
                ("completed_at", models.DateTimeField(blank=True, null=True)),
                ("archived_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("location", models.CharField(max_length=500)),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(key__isnull=False),
                        fields=["domain", "workflow_key", "key"],
                        name="archived_instance_key",
                    )
                ],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="instance", index=ARCHIVABLE)],
            database_operations=[
                migrations.RunPython(add_archivable_index, drop_archivable_index),
            ],
        ),
        migrations.AlterField(
            model_name="operatoraction",
            name="action",
            field=models.CharField(
                choices=[
                    ("retry", "Retry"),
                    ("cancel", "Cancel"),
                    ("resolve", "Resolve without retry"),
                    ("replay", "Replay job"),
                    ("force-release", "Force-release lock"),
                    ("restore", "Restore from the archive"),
                ],
                max_length=20,
            ),
        ),
        migrations.RunPython(register, unregister),
    ]
