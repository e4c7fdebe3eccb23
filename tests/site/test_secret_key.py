"""No public default SECRET_KEY: without one the installation generates its own once (owner-only
file, the same key for every process that reads it), and `check --deploy` says so."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.site.server import ROOT
from vnext.secret_key import installation_secret_key


def test_the_key_is_generated_once_owner_only_and_then_reused(tmp_path: Path):
    path = tmp_path / "var" / "secret_key"
    first = installation_secret_key(path)
    assert len(first) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert installation_secret_key(path) == first
    assert installation_secret_key(tmp_path / "other" / "secret_key") != first


def _deploy_check(env: dict[str, str]) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    environment.update(env)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout + result.stderr


def test_check_deploy_warns_about_a_generated_key(tmp_path: Path):
    generated = _deploy_check({"VNEXT_SECRET_KEY_FILE": str(tmp_path / "secret_key")})
    assert "vnext.W001" in generated
    assert (tmp_path / "secret_key").is_file()
    chosen = _deploy_check({"SECRET_KEY": "x" * 60, "VNEXT_SECRET_KEY_FILE": str(tmp_path / "k")})
    assert "vnext.W001" not in chosen
    assert not (tmp_path / "k").exists()


def test_a_key_that_starts_with_a_dollar_is_used_as_it_is(tmp_path: Path):
    # django-environ reads a value (or a default) starting with `$` as another variable's name:
    # a generated key that happened to start with one stopped the process (RecursionError).
    generated = tmp_path / "secret_key"
    installation_secret_key(generated)
    generated.write_text("$" + "k" * 59)
    answer = _deploy_check({"VNEXT_SECRET_KEY_FILE": str(generated)})
    assert "RecursionError" not in answer
    assert "vnext.W001" in answer
    chosen = "$" + "c" * 59
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.SECRET_KEY == settings.SIMPLE_JWT['SIGNING_KEY'] == "
        f"{chosen!r})"
    )
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environment.update({"SECRET_KEY": chosen, "DJANGO_SETTINGS_MODULE": "vnext.settings"})
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.strip() == "True", result.stderr[-2000:]
