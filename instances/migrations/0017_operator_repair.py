"""Operators repair at scale: the audit says where an action came from (channel), suspend,
resume, migrate and batch actions; held jobs (their instance is suspended); batches and their
items."""


import django.db.models.deletion
import django.utils.timezone
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('instances', '0016_dashboard_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='operatoraction',
            name='channel',
            field=models.CharField(choices=[('admin', 'Admin'), ('api', 'API'), ('command', 'Command'), ('batch', 'Batch')], default='admin', max_length=10),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled'), ('skipped', 'Skipped'), ('instance_faulted', 'Faulted its instance'), ('held', 'Held: instance suspended')], default='pending', max_length=20),
        ),
        migrations.AlterField(
            model_name='operatoraction',
            name='action',
            field=models.CharField(choices=[('retry', 'Retry'), ('cancel', 'Cancel'), ('resolve', 'Resolve without retry'), ('replay', 'Replay job'), ('force-release', 'Force-release lock'), ('restore', 'Restore from the archive'), ('suspend', 'Suspend'), ('resume', 'Resume'), ('migrate', 'Migrate to another version'), ('batch', 'Batch operation')], max_length=20),
        ),
        migrations.CreateModel(
            name='Batch',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('domain', models.CharField(max_length=100)),
                ('workflow_key', models.CharField(max_length=200)),
                ('operation', models.CharField(choices=[('retry', 'Retry'), ('cancel', 'Cancel'), ('suspend', 'Suspend'), ('resume', 'Resume'), ('migrate', 'Migrate')], max_length=10)),
                ('arguments', models.JSONField(blank=True, default=dict)),
                ('filter', models.JSONField(blank=True, default=list)),
                ('status', models.CharField(choices=[('running', 'Running'), ('completed', 'Completed'), ('cancelled', 'Cancelled')], default='running', max_length=10)),
                ('total', models.PositiveIntegerField(default=0)),
                ('done', models.PositiveIntegerField(default=0)),
                ('refused', models.PositiveIntegerField(default=0)),
                ('failed', models.PositiveIntegerField(default=0)),
                ('created_by', models.CharField(max_length=150)),
                ('channel', models.CharField(choices=[('admin', 'Admin'), ('api', 'API'), ('command', 'Command'), ('batch', 'Batch')], default='api', max_length=10)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'verbose_name_plural': 'batches',
                'indexes': [models.Index(fields=['domain', 'workflow_key', '-created_at'], name='batch_list')],
            },
        ),
        migrations.CreateModel(
            name='BatchItem',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('position', models.PositiveIntegerField()),
                ('instance_id', models.UUIDField()),
                ('outcome', models.CharField(choices=[('pending', 'Pending'), ('done', 'Done'), ('refused', 'Refused'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='pending', max_length=10)),
                ('reason', models.TextField(blank=True)),
                ('handled_at', models.DateTimeField(blank=True, null=True)),
                ('batch', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='items', to='instances.batch')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('outcome', 'pending')), fields=['batch', 'position'], name='batch_item_pending')],
                'constraints': [models.UniqueConstraint(fields=('batch', 'position'), name='batch_item_position')],
            },
        ),
    ]
