"""The Celery application. Tasks live in each app's `tasks.py`; settings come from `CELERY_*`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

app = Celery("vnext")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
