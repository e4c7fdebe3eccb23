"""Django's WSGI handler, for the `serving` suite's gunicorn topology only.

The project has no `vnext/wsgi.py` (it serves through `vnext.asgi`); this is the module gunicorn
would serve: `gunicorn bench.wsgi_django:application`.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vnext.settings")

application = get_wsgi_application()
