"""Outbound instance events: the outbox table the store writes in the transaction of each change
(instances/outbox.py) and the relay publishes from (`manage.py outbox_relay`)."""


import django.utils.timezone
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('instances', '0017_operator_repair'),
    ]

    operations = [
        migrations.CreateModel(
            name='OutboxEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('instance_id', models.UUIDField()),
                ('event_id', models.UUIDField(default=uuid.uuid4)),
                ('type', models.CharField(max_length=100)),
                ('source', models.CharField(max_length=500)),
                ('subject', models.CharField(blank=True, max_length=200)),
                ('time', models.DateTimeField(default=django.utils.timezone.now)),
                ('data', models.JSONField(default=dict)),
                ('target', models.CharField(max_length=100)),
                ('published_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('published_at__isnull', True)), fields=['target', 'id'], name='outbox_pending'), models.Index(condition=models.Q(('published_at__isnull', False)), fields=['published_at'], name='outbox_published')],
            },
        ),
    ]
