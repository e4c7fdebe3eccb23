"""The project's settings plus the bench-only apps of the transition and `order` baselines
(django-fsm-2, viewflow's workflow app, SpiffWorkflow's rows)."""

from vnext.settings import *  # noqa: F403
from vnext.settings import INSTALLED_APPS, VNEXT

INSTALLED_APPS = [*INSTALLED_APPS, "bench.fsm_library", "viewflow.workflow", "bench.order_peers"]
# Only viewflow's engine and models: its site (menus, middleware) stays out of the project.
VIEWFLOW = {"AUTOREGISTER": False}
# The benchmarks' HTTP stubs (fan-out) listen on loopback, which the egress policy refuses.
VNEXT = {**VNEXT, "EGRESS_ALLOW_CIDRS": ["127.0.0.0/8", "::1/128"]}
