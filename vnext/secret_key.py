"""The installation's own `SECRET_KEY` when the environment sets none: generated once, kept in
`var/secret_key` readable by its owner only, and the same for every process of the installation
(the first to start writes it; the others read it). No public default key exists. `manage.py
check --deploy` warns that production runs on a generated key (`vnext.W001`), or on the field
encryption key derived from it (`vnext.W002`)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from django.core import checks
from django.core.management.utils import get_random_secret_key


def installation_secret_key(path: Path) -> str:
    """The key stored at `path`, created (mode 0600) when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip()
        if key:
            return key
        raise RuntimeError(f"{path} is empty: delete it, or set SECRET_KEY") from None
    key = get_random_secret_key()
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
    return key


@checks.register(checks.Tags.security, deploy=True)
def generated_key_check(app_configs: object, **kwargs: object) -> list[checks.CheckMessage]:
    """`check --deploy`: say when the key is the installation's generated one."""
    from django.conf import settings

    if getattr(settings, "SECRET_KEY_GENERATED", False):
        return [
            checks.Warning(
                "SECRET_KEY is not set: this installation runs on the key it generated in "
                f"{settings.SECRET_KEY_FILE}.",
                hint="Set SECRET_KEY in production, the same on every server of the "
                "installation (sessions and signed values must verify everywhere).",
                id="vnext.W001",
            )
        ]
    return []


def derived_encryption_key(secret_key: str) -> str:
    """The Fernet key of fields encrypted at rest when none is configured (DEBUG, or an
    installation on its generated SECRET_KEY): stable for the installation, unguessable without
    its SECRET_KEY, and lost with it (production configures its own keys)."""
    digest = hashlib.sha256(f"vnext-field-encryption:{secret_key}".encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


@checks.register(checks.Tags.security, deploy=True)
def derived_encryption_key_check(
    app_configs: object, **kwargs: object
) -> list[checks.CheckMessage]:
    """`check --deploy`: say when fields encrypted at rest use the key derived from SECRET_KEY."""
    from django.conf import settings

    if getattr(settings, "ENCRYPTION_KEYS_DERIVED", False):
        return [
            checks.Warning(
                "VNEXT_ENCRYPTION_KEYS is not set: fields encrypted at rest use a key derived "
                "from SECRET_KEY, and a new SECRET_KEY would leave them unreadable.",
                hint="Set VNEXT_ENCRYPTION_KEYS (Fernet keys, comma separated, the current one "
                "first) in production, the same on every server of the installation.",
                id="vnext.W002",
            )
        ]
    return []
