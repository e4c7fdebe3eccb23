"""The operator-level grant: migrate instances and run batch operations."""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('workflows', '0002_workflow_grants'),
    ]

    operations = [
        migrations.AddField(
            model_name='workflowgrant',
            name='operate_instances',
            field=models.BooleanField(default=False, help_text='Operator-level: migrate instances to another version and run batch operations (retry, cancel, suspend, resume, migrate) over a filter.'),
        ),
    ]
