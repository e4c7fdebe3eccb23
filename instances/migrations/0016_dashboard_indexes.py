"""The dashboard's indexes, built CONCURRENTLY on PostgreSQL (the instance and history tables
keep taking writes while they build; `IF NOT EXISTS`, so a rerun after an interruption goes on):
the history by start time (the last hour of transitions and faults per workflow) and the
cancelled instances (told apart from the completed ones without reading those)."""

from django.db import migrations, models

CANCELLED = models.Index(
    condition=models.Q(status="C", effective_state_subtype="cancelled"),
    fields=["domain", "workflow_key"],
    name="instance_cancelled",
)
STARTED = models.Index(fields=["started_at"], name="transition_started")
BUILT = (("instance", CANCELLED), ("instancetransition", STARTED))


def add_indexes(apps, schema_editor):
    for model_name, index in BUILT:
        model = apps.get_model("instances", model_name)
        if schema_editor.connection.vendor == "postgresql":
            sql = str(index.create_sql(model, schema_editor, concurrently=True))
            schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
        else:
            schema_editor.add_index(model, index)


def drop_indexes(apps, schema_editor):
    for model_name, index in BUILT:
        schema_editor.remove_index(apps.get_model("instances", model_name), index)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("instances", "0015_busy_index_partial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name="instance", index=CANCELLED),
                migrations.AddIndex(model_name="instancetransition", index=STARTED),
            ],
            database_operations=[migrations.RunPython(add_indexes, drop_indexes)],
        ),
    ]
