"""Reads that do not grow with the table: every instance by business key through a full index
(the live-key constraint is partial), which serves the admin's exact/prefix key search too
(the key first, by character), and instances counted per workflow and status by the database
itself.

The counts: after every insert and delete of instances (a statement trigger, one delta per
workflow and status of the statement, however many rows it wrote) and every status change (a
row trigger, -1 and +1), a signed delta row is appended to `instances_instancecountdelta`;
`instances.counts.instance_counts_fold` adds them into `instances_instancecount`. Deltas are
inserts, so concurrent transitions never wait on a shared counter row (nor deadlock on two).
A TRUNCATE of instances empties both. The existing rows are counted once, here, under the
trigger's table lock: no write slips between the count and the first delta. SQLite (the
embedded server) gets row triggers.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.migrations.operations import AddIndex


DELTA = "instances_instancecountdelta"

POSTGRES_TRIGGERS = f"""
CREATE OR REPLACE FUNCTION vnext_instance_count_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {DELTA} (domain, workflow_key, status, delta)
    SELECT domain, workflow_key, status, count(*) FROM vnext_new_rows GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION vnext_instance_count_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {DELTA} (domain, workflow_key, status, delta)
    SELECT domain, workflow_key, status, -count(*) FROM vnext_old_rows GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION vnext_instance_count_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {DELTA} (domain, workflow_key, status, delta)
    VALUES (OLD.domain, OLD.workflow_key, OLD.status, -1),
           (NEW.domain, NEW.workflow_key, NEW.status, 1);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION vnext_instance_count_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {DELTA};
    DELETE FROM instances_instancecount;
    RETURN NULL;
END $$;
CREATE TRIGGER vnext_instance_count_truncate AFTER TRUNCATE ON instances_instance
    FOR EACH STATEMENT EXECUTE FUNCTION vnext_instance_count_truncated();
CREATE TRIGGER vnext_instance_count_insert AFTER INSERT ON instances_instance
    REFERENCING NEW TABLE AS vnext_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION vnext_instance_count_inserted();
CREATE TRIGGER vnext_instance_count_delete AFTER DELETE ON instances_instance
    REFERENCING OLD TABLE AS vnext_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION vnext_instance_count_deleted();
CREATE TRIGGER vnext_instance_count_update
    AFTER UPDATE OF status, domain, workflow_key ON instances_instance FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.domain IS DISTINCT FROM NEW.domain
          OR OLD.workflow_key IS DISTINCT FROM NEW.workflow_key)
    EXECUTE FUNCTION vnext_instance_count_moved();
"""

POSTGRES_DROP = """
DROP TRIGGER IF EXISTS vnext_instance_count_insert ON instances_instance;
DROP TRIGGER IF EXISTS vnext_instance_count_delete ON instances_instance;
DROP TRIGGER IF EXISTS vnext_instance_count_update ON instances_instance;
DROP TRIGGER IF EXISTS vnext_instance_count_truncate ON instances_instance;
DROP FUNCTION IF EXISTS vnext_instance_count_truncated();
DROP FUNCTION IF EXISTS vnext_instance_count_inserted();
DROP FUNCTION IF EXISTS vnext_instance_count_deleted();
DROP FUNCTION IF EXISTS vnext_instance_count_moved();
"""

SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER vnext_instance_count_insert AFTER INSERT ON instances_instance
    BEGIN
        INSERT INTO {DELTA} (domain, workflow_key, status, delta)
        VALUES (NEW.domain, NEW.workflow_key, NEW.status, 1);
    END""",
    f"""CREATE TRIGGER vnext_instance_count_delete AFTER DELETE ON instances_instance
    BEGIN
        INSERT INTO {DELTA} (domain, workflow_key, status, delta)
        VALUES (OLD.domain, OLD.workflow_key, OLD.status, -1);
    END""",
    f"""CREATE TRIGGER vnext_instance_count_update
    AFTER UPDATE OF status, domain, workflow_key ON instances_instance
    WHEN OLD.status IS NOT NEW.status OR OLD.domain IS NOT NEW.domain
        OR OLD.workflow_key IS NOT NEW.workflow_key
    BEGIN
        INSERT INTO {DELTA} (domain, workflow_key, status, delta)
        VALUES (OLD.domain, OLD.workflow_key, OLD.status, -1),
               (NEW.domain, NEW.workflow_key, NEW.status, 1);
    END""",
]

BACKFILL = """
INSERT INTO instances_instancecount (domain, workflow_key, status, count)
SELECT domain, workflow_key, status, COUNT(*) FROM instances_instance GROUP BY 1, 2, 3
"""


def create_triggers(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_TRIGGERS)
    elif vendor == "sqlite":
        for statement in SQLITE_TRIGGERS:
            schema_editor.execute(statement)
    else:
        return
    schema_editor.execute(BACKFILL)


def drop_triggers(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_DROP)
    elif vendor == "sqlite":
        for name in ("insert", "delete", "update"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS vnext_instance_count_{name}")


FOLD_SWEEP = ("vnext: fold instance counts", "vnext.instance_counts_fold", 30)


def register_fold(apps, schema_editor):
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    name, task, seconds = FOLD_SWEEP
    every, _ = interval_model.objects.get_or_create(every=seconds, period="seconds")
    task_model.objects.update_or_create(
        name=name, defaults={"task": task, "interval": every, "enabled": True}
    )


def unregister_fold(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name=FOLD_SWEEP[0]
    ).delete()


class AddIndexWithoutLock(AddIndexConcurrently):
    """`CREATE INDEX CONCURRENTLY` on PostgreSQL (writes go on during the build of a big
    table), a plain index elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    # The indexes are built concurrently, outside a transaction; the triggers and the first
    # count are one transaction of their own (RunPython atomic).
    atomic = False

    dependencies = [
        ('instances', '0012_instant_function'),
        ('django_celery_beat', '0019_alter_periodictasks_options'),
    ]

    operations = [
        migrations.CreateModel(
            name='InstanceCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('domain', models.CharField(max_length=100)),
                ('workflow_key', models.CharField(max_length=200)),
                ('status', models.CharField(choices=[('A', 'Active'), ('B', 'Busy'), ('C', 'Completed'), ('F', 'Faulted'), ('P', 'Passive')], max_length=1)),
                ('count', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='InstanceCountDelta',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('domain', models.CharField(max_length=100)),
                ('workflow_key', models.CharField(max_length=200)),
                ('status', models.CharField(choices=[('A', 'Active'), ('B', 'Busy'), ('C', 'Completed'), ('F', 'Faulted'), ('P', 'Passive')], max_length=1)),
                ('delta', models.BigIntegerField()),
            ],
        ),
        AddIndexWithoutLock(
            model_name='instance',
            index=models.Index(fields=['key', 'domain', 'workflow_key'], name='instance_business_key', opclasses=['varchar_pattern_ops', 'text_ops', 'text_ops']),
        ),
        migrations.AddConstraint(
            model_name='instancecount',
            constraint=models.UniqueConstraint(fields=('domain', 'workflow_key', 'status'), name='instance_count_unique'),
        ),
        migrations.RunPython(create_triggers, drop_triggers, atomic=True),
        migrations.RunPython(register_fold, unregister_fold, atomic=True),
    ]
