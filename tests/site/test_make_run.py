"""`make run`'s server (`manage.py vnext_run`) starts from nothing, serves the admin, the docs
page and the API with the examples loaded, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_embedded_server_end_to_end(tmp_path: Path):
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'vnext.sqlite3'}",
        "PORT": str(port),
        "VNEXT_OPERATOR_USERNAME": "ops",
        "VNEXT_OPERATOR_PASSWORD": "ops-secret-42",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = (tmp_path / "server.log").open("w+")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "vnext_run"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.5)

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
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=20)
        finally:
            if server.poll() is None:
                server.kill()
    output = (tmp_path / "server.log").read_text()
    assert code == 0, output
    assert "operator account: ops / (from VNEXT_OPERATOR_PASSWORD)" in output
    assert "examples imported" in output
