"""The Busy-past-lease index becomes partial: it holds only the few Busy rows the reaper, the
admin's lease filter, the dashboard and the metrics look for, and a hop's guarded UPDATE
(`WHERE id = … AND status = 'A'`) can no longer pick it over the primary key when the table's
statistics are stale."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0014_retention_archive"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="instance", name="instance_busy"),
        migrations.AddIndex(
            model_name="instance",
            index=models.Index(
                condition=models.Q(status="B"), fields=["busy_since"], name="instance_busy"
            ),
        ),
    ]
