"""`make run`'s server (`manage.py vnext_run`) starts from nothing, serves the admin, the docs
page and the API with the examples loaded, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.site.server import ROOT, vnext_server


@pytest.mark.slow
def test_embedded_server_end_to_end(tmp_path: Path):
    env = {"VNEXT_OPERATOR_USERNAME": "ops", "VNEXT_OPERATOR_PASSWORD": "ops-secret-42"}
    with vnext_server(tmp_path, env) as server:
        base = server.base
        assert httpx.get(f"{base}/admin/login/").status_code == 200
        assert httpx.get(f"{base}/static/admin/css/base.css").status_code == 200
        docs = httpx.get(f"{base}/api/docs/")
        assert docs.status_code == 200
        assert "swagger-ui" in docs.text
        listing = httpx.get(
            f"{base}/api/v1/definitions/workflow/core", auth=("ops", "ops-secret-42")
        )
        assert listing.status_code == 200
        keys = {item["key"] for item in listing.json()["items"]}
        assert {"instance-management-test-workflow", "payload-modes"} <= keys
        # The state function's long-poll is served on the ASGI side of the same port.
        flow = f"{base}/api/v1/core/workflows/chain-busy-leaf/instances"
        auth = ("ops", "ops-secret-42")
        started = httpx.post(f"{flow}/start?sync=true", json={}, auth=auth, timeout=30)
        assert started.status_code == 200, started.text
        state_url = f"{flow}/{started.json()['id']}/functions/state"
        etag = httpx.get(state_url, auth=auth).headers["ETag"]
        began = time.monotonic()
        parked = httpx.get(
            f"{state_url}?wait=1", auth=auth, headers={"If-None-Match": etag}, timeout=10
        )
        assert parked.status_code == 304
        assert time.monotonic() - began >= 1.0
        stale = httpx.get(f"{state_url}?wait=30", auth=auth, headers={"If-None-Match": '"x"'})
        assert (stale.status_code, stale.json()["state"]) == (200, "leaf-waiting")
    output = server.output()
    assert server.exit_code == 0, output
    assert "operator account: ops / (from VNEXT_OPERATOR_PASSWORD)" in output
    assert "examples imported" in output


@pytest.mark.slow
def test_make_serve_serves_a_migrated_database_and_does_nothing_else(tmp_path: Path):
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'vnext.sqlite3'}",
        "VNEXT_OPERATOR_USERNAME": "ops",
        "VNEXT_OPERATOR_PASSWORD": "ops-secret-42",
    }
    environment = {**os.environ, **env}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    # The release step production runs first (`make migrate`; here with the account too).
    subprocess.run(
        [sys.executable, "manage.py", "vnext_run", "--prepare-only", "--no-examples"],
        cwd=ROOT,
        env=environment,
        check=True,
        capture_output=True,
    )
    with vnext_server(tmp_path, env, args=("--serve-only",)) as server:
        listing = httpx.get(
            f"{server.base}/api/v1/definitions/workflow/core", auth=("ops", "ops-secret-42")
        )
        assert listing.status_code == 200
        assert listing.json()["items"] == []  # nothing was imported
    quiet = server.output()
    assert server.exit_code == 0, quiet
    assert "database migrated" not in quiet
    assert "operator account" not in quiet
    assert "GET /health" not in quiet  # no access log unless asked for

    with vnext_server(
        tmp_path, {**env, "VNEXT_HTTP_ACCESS_LOG": "true"}, args=("--serve-only",)
    ) as logged:
        pass
    assert '"GET /health HTTP/1.1" 200' in logged.output()
