"""Production settings from the environment (vnext/settings.py): Secure cookies, HSTS, the SSL
redirect and the proxy's scheme header. With them set `manage.py check --deploy` is clean at
the warning level; without them it names what is missing."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.test import Client

from tests.site.server import ROOT

PRODUCTION = {
    "VNEXT_SECURE_COOKIES": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
}


def _manage(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "VNEXT_SECURE"))},
        # What production sets anyway (each has its own check): a key, an encryption key.
        "SECRET_KEY": secrets.token_urlsafe(60),
        "VNEXT_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "VNEXT_SECRET_KEY_FILE": str(tmp_path / "secret_key"),
        "DEBUG": "false",
        **env,
    }
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_settings(tmp_path: Path):
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION, tmp_path=tmp_path
    )
    assert (result.returncode, result.stdout.strip()) == (
        0,
        "System check identified no issues (0 silenced).",
    )


def test_check_deploy_names_what_is_missing_without_them(tmp_path: Path):
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env={}, tmp_path=tmp_path)
    assert result.returncode == 1
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr


def test_a_half_given_proxy_header_refuses_to_start(tmp_path: Path):
    result = _manage(
        "check", env={"SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}, tmp_path=tmp_path
    )
    assert result.returncode == 1
    assert "SECURE_PROXY_SSL_HEADER is `<header as in META>,<value>`" in result.stderr


@pytest.fixture
def production(settings):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")


@pytest.mark.django_db
@pytest.mark.usefixtures("production")
def test_behind_the_proxy_https_gets_hsts_and_secure_cookies_plain_http_is_redirected():
    client = Client()
    plain = client.get("/admin/login/")
    assert (plain.status_code, plain["Location"]) == (301, "https://testserver/admin/login/")
    secure = client.get("/admin/login/", headers={"X-Forwarded-Proto": "https"})
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=3600"
    assert secure.cookies["csrftoken"]["secure"] is True


@pytest.mark.django_db
@pytest.mark.usefixtures("production")
def test_the_health_probe_is_not_redirected():
    assert Client().get("/health").status_code == 200
