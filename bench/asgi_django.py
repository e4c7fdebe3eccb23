"""Django's own ASGI handler, for the `serving` suite's "uvicorn + Django ASGI" topology only.

`vnext.asgi` routes HTTP through a2wsgi instead; this module is what it would be without the
bridge: `uvicorn bench.asgi_django:application`.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

application = get_asgi_application()
