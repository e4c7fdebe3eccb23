"""The project's settings plus the bench-only app of the django-fsm-2 baseline."""

from vnext.settings import *  # noqa: F403
from vnext.settings import INSTALLED_APPS, VNEXT

INSTALLED_APPS = [*INSTALLED_APPS, "bench.fsm_library"]
# The benchmarks' HTTP stubs (fan-out) listen on loopback, which the egress policy refuses.
VNEXT = {**VNEXT, "EGRESS_ALLOW_CIDRS": ["127.0.0.0/8", "::1/128"]}
