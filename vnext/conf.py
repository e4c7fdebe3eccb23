"""The platform's settings: one `VNEXT` dict in Django settings, with defaults defined here."""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Wall-clock limit for one script call (rule, mapping, timer, ...), in seconds.
    "SCRIPT_TIMEOUT_SECONDS": 2.0,
    # Modules every workflow's scripts may import; `attributes.scripts.allowedModules` adds more.
    "SCRIPT_DEFAULT_ALLOWED_MODULES": ("math", "datetime", "decimal", "re", "json"),
    # Folder of example workflows that `make run` imports.
    "EXAMPLES_DIR": None,
    # Jobs: "celery" or "embedded"; None picks celery when CELERY_BROKER_URL is set.
    "JOB_DISPATCH": None,
    # How long a claimed job is its worker's; past it another worker may take it over.
    "JOB_LEASE_SECONDS": 30.0,
    "JOB_MAX_ATTEMPTS": 5,
    "JOB_RETRY_BASE_SECONDS": 2.0,
    # Succeeded and cancelled jobs are pruned after this many days; failed ones stay.
    "JOB_RETENTION_DAYS": 7.0,
    # An instance Busy longer than this with no live job is faulted by the reaper.
    "BUSY_LEASE_SECONDS": 300.0,
    # Worker threads of the embedded (in-process) job runner.
    "EMBEDDED_RUNNER_THREADS": 4,
}


def vnext_setting(name: str) -> Any:
    """Return `settings.VNEXT[name]`, falling back to the documented default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown VNEXT setting {name!r}")
    return getattr(settings, "VNEXT", {}).get(name, DEFAULTS[name])
