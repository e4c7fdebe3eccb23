"""vNext for Django: the project package (settings, urls, ASGI routing, Celery app)."""

from vnext.celery import app as celery_app

__all__ = ["celery_app"]
