"""Script attacks over the public API against a real server process (`manage.py vnext_run`):
a workflow whose transition mappings are attacks is published and driven over HTTP. Each attack
faults its instance with a `Script:` error and no secret in the answer, and the server keeps
answering `/health` promptly while a script spins in C code or allocates without bound."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.builders import state, transition, workflow
from tests.instances.answers import fault, fault_code
from tests.site.server import vnext_server

CANARY = "vnext-http-canary-5b2f"
SECRET_KEY = "http-isolation-secret-key-0c77e1d2a9"
DATABASE_PASSWORD = "http-isolation-db-password"

ATTACKS = {
    "spin-in-c": "return any(iter(int, 1))",
    "allocate": "return len(''.join('x' * 5000000 for i in range(1000)))",
    "regex": "import re\n    return bool(re.match('(a+)+$', 'a' * 40 + 'b'))",
    "import-at-run-time": "imp = getattr(get, 'imp' + 'ort', None)\n    return imp('os')",
    "frames": "def gen():\n        yield 1\n    return get(gen(), 'gi_frame.f_back.f_globals')",
    "format": "return str.format('{0.instance}', context)",
    "setattr-class": "setattr(ScriptResponse, 'data', 'hijacked')\n    return {}",
    "system-exit": "raise SystemExit(0)",
    "deep-answer": "x = []\n    for i in range(100000):\n        x = [x]\n    return {'x': x}",
    "nul-answer": "return {'name': 'a\\x00b'}",
    "factorial": "import math\n    return {'n': math.factorial(10 ** 6) > 0}",
}


def _mapping(code: str) -> dict[str, str]:
    source = f"def handler(context):\n    {code}\n"
    return {"location": "./src/Attack.py", "code": source, "encoding": "NAT"}


def attack_workflow() -> dict[str, Any]:
    transitions = [
        transition(name, "done", mapping=_mapping(code)) for name, code in ATTACKS.items()
    ]
    transitions.append(transition("harmless", "done", mapping=_mapping("return {'ok': True}")))
    return workflow([state("ready", 1, transitions), state("done", 3, subType=1)], key="attack-lab")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    env = {
        "SECRET_KEY": SECRET_KEY,
        "VNEXT_ATTACK_CANARY": CANARY,
        "PGPASSWORD": DATABASE_PASSWORD,
        "VNEXT_SCRIPT_TIMEOUT_SECONDS": "1.5",
        "VNEXT_SCRIPT_WORKERS": "2",
    }
    folder = tmp_path_factory.mktemp("isolation-server")
    with vnext_server(folder, env, args=("--no-examples",)) as running:
        token = re.search(r"API token:\s+(\w+)", running.output())
        assert token, running.output()
        yield running.base, {"Authorization": f"Token {token.group(1)}"}, running.log


@pytest.fixture(scope="module")
def api(server: tuple[str, dict[str, str], Path]) -> Iterator[httpx.Client]:
    base, headers, _ = server
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        published = client.post("/api/v1/definitions/publish", json=attack_workflow())
        assert published.status_code == 200, published.text
        yield client


def _fire(client: httpx.Client, transition_key: str) -> httpx.Response:
    instances = "/api/v1/core/workflows/attack-lab/instances"
    started = client.post(f"{instances}/start?sync=true", json={})
    assert started.status_code == 200, started.text
    instance_id = started.json()["id"]
    return client.patch(
        f"{instances}/{instance_id}/transitions/{transition_key}?sync=true", json={}
    )


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["spin-in-c", "allocate", "regex", "factorial"])
def test_health_answers_while_a_script_spins_or_allocates(api: httpx.Client, attack: str):
    answer: dict[str, httpx.Response] = {}
    attacker = threading.Thread(target=lambda: answer.update(r=_fire(api, attack)))
    attacker.start()
    latencies = []
    with httpx.Client(base_url=str(api.base_url), timeout=5) as probe:
        while attacker.is_alive():
            started = time.monotonic()
            health = probe.get("/health")
            latencies.append(time.monotonic() - started)
            assert health.status_code == 200
            time.sleep(0.05)
    attacker.join()
    assert len(latencies) >= 5, "the attack did not run long enough to probe /health"
    assert max(latencies) < 1.0, latencies
    assert fault_code(answer["r"]) in {"Script:Timeout", "Script:ResourceLimit"}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_faults_its_instance_with_a_script_error_and_no_secret(
    api: httpx.Client, server: tuple[str, dict[str, str], Path], attack: str
):
    response = _fire(api, attack)
    error = fault(response)
    assert error["errorCode"].startswith("Script:"), error
    for secret in (CANARY, SECRET_KEY, DATABASE_PASSWORD):
        assert secret not in response.text
        assert secret not in server[2].read_text()
    assert api.get("/health").status_code == 200
    # A harmless script on a fresh instance still runs: the pool recovered.
    harmless = _fire(api, "harmless")
    assert (harmless.status_code, harmless.json()["status"]) == (200, "C"), harmless.text
