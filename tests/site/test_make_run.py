"""`make run`'s server (`manage.py vnext_run`) starts from nothing, serves the admin, the docs
page and the API with the examples loaded, and stops cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.site.server import vnext_server


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
    output = server.output()
    assert server.exit_code == 0, output
    assert "operator account: ops / (from VNEXT_OPERATOR_PASSWORD)" in output
    assert "examples imported" in output
