"""ASGI entry point: HTTP through Django, WebSocket through Channels (consumers come later)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files are answered before the middleware chain, which stays fully async:
        # a sync-only middleware would add a thread hop to every request.
        "http": ASGIStaticFilesHandler(django_asgi_app),
        "websocket": URLRouter([]),
    }
)
