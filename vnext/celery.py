"""The Celery application. Tasks live in each app's `tasks.py`; settings come from `CELERY_*`."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

from instances.engine.script_pool import script_pool

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

app = Celery("vnext")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _start_script_pool_in_child(**_: object) -> None:
    # Each prefork child has its own pool of script workers, started before its first task.
    script_pool()


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    # `VNEXT_WORKER_METRICS_PORT`: this worker's metrics on their own port (a worker on a host
    # without a server). Prefork children record into PROMETHEUS_MULTIPROC_DIR, which must then
    # be set for the worker (`make worker` does).
    port = os.environ.get("VNEXT_WORKER_METRICS_PORT")
    if port:
        from prometheus_client import start_http_server

        from vnext.observability import scrape_registry

        start_http_server(int(port), registry=scrape_registry())


@worker_init.connect
def _start_script_pool_in_solo_worker(sender: object = None, **_: object) -> None:
    # The solo and threads pools run tasks in this process; prefork children start their own.
    pool_name = getattr(getattr(sender, "pool_cls", None), "__module__", "")
    if "prefork" not in str(pool_name):
        script_pool()
