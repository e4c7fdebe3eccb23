"""The project's settings plus the bench-only app of the django-fsm-2 baseline."""

from vnext.settings import *  # noqa: F403
from vnext.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.fsm_library"]
