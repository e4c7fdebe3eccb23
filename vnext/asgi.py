"""ASGI entry point (`make run`, uvicorn): HTTP through Django, WebSocket through Channels.

HTTP requests go to Django's WSGI handler through a2wsgi's bridge, on a fixed pool of
`VNEXT_HTTP_THREADS` long-lived threads, in one hop a request (`vnext/wsgi_bridge.py`).
Django's own ASGI handler runs the sync part of every request in a thread of its own, made for
that request: on this machine that costs about 2 ms per request (`GET /health` 3.9 ms against
1.8 ms through the bridge, `make bench`), and no database connection outlives its request.
Through the bridge a thread, and its connection, serves request after request. Routes that must
wait without holding a thread (long-poll) will be mounted beside it as ASGI routes: the state
function's long-poll (`?wait=`, `instances/api/longpoll.py`).

In front of all of it, `vnext.serving.ServingLayer` reads request bodies (with a size cap and a
time-out) before a thread is taken and answers `/health` on the event loop. A WebSocket on any
other path than the live state's is accepted and closed with 4404, as a refused read is.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

# Django must be set up before anything imports models.
django_wsgi_app = get_wsgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from instances.api.live import InstanceStateSocket, NoSuchSocket  # noqa: E402
from instances.api.longpoll import LongPollRouter, StateLongPoll  # noqa: E402
from vnext.conf import vnext_setting  # noqa: E402
from vnext.observability import redact_credentials_in  # noqa: E402
from vnext.serving import ServingLayer  # noqa: E402
from vnext.static import ConfinedStaticFilesHandler  # noqa: E402
from vnext.wsgi_bridge import OneHopWSGIMiddleware  # noqa: E402

# uvicorn logs every WebSocket's URL (and, with the access log on, every request's) on its own
# loggers and handlers: redact `?token=` there too.
redact_credentials_in("uvicorn", "uvicorn.error", "uvicorn.access")

if os.environ.get("VNEXT_EMBEDDED_RUNNER_IN_WORKERS"):
    # A worker process of a multi-process `make run`: it runs jobs too (see vnext_run).
    from instances.runner import start_embedded_runner

    start_embedded_runner()

router = ProtocolTypeRouter(
    {
        # Long-polls of the state function wait on the event loop; the rest is the WSGI bridge.
        "http": LongPollRouter(
            StateLongPoll(django_wsgi_app),
            OneHopWSGIMiddleware(
                # The stubs type a WSGI handler's answer as HttpResponseBase: bytes chunks.
                ConfinedStaticFilesHandler(django_wsgi_app),  # type: ignore[arg-type]
                workers=int(vnext_setting("HTTP_THREADS")),
            ),
        ),
        # The live state of an instance (instances/api/live.py).
        "websocket": URLRouter(
            [
                path(
                    "ws/<str:domain>/workflows/<str:workflow>/instances/<str:instance>/",
                    InstanceStateSocket.as_asgi(wsgi_app=django_wsgi_app),
                ),
                re_path(r"", NoSuchSocket.as_asgi()),
            ]
        ),
    }
)
application = ServingLayer(router)
