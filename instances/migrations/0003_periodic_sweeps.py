"""Register the periodic sweeps with django-celery-beat's database scheduler (`make beat`)."""

from django.db import migrations

SWEEPS = [
    ("vnext: dispatch due jobs", "vnext.jobs_dispatch_due", 5),
    ("vnext: reap stranded Busy instances", "vnext.instances_reap_stranded_busy", 30),
    ("vnext: sweep expired resource locks", "vnext.locks_sweep_expired", 60),
    ("vnext: prune finished jobs", "vnext.jobs_prune_finished", 3600),
]


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
    dependencies = [
        ("instances", "0002_jsonb_merge_function"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(register, unregister)]
