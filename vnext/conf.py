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
}


def vnext_setting(name: str) -> Any:
    """Return `settings.VNEXT[name]`, falling back to the documented default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown VNEXT setting {name!r}")
    return getattr(settings, "VNEXT", {}).get(name, DEFAULTS[name])
