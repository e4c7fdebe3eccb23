"""Credential-like request headers (issue 30, item 5) never reach scripts (`context.headers`) nor
job rows: every name matching `VNEXT["HEADER_DENY_PATTERNS"]` (`*auth*`, `*token*`, `*secret*`,
`*session*`, `*csrf*`, `*key*`, `*cookie*` by default) is dropped where the request is read;
an operator's own list replaces the patterns, never the four credential headers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from instances.engine.script_runner import HeaderDenyList
from instances.job_table import Job
from instances.models import Instance
from tests.engine.builders import script, state, transition, workflow
from tests.instances.workflows import ping_pong, publish

pytestmark = pytest.mark.django_db

# Sent with every request: each credential-like one carries "secret" in its value.
CREDENTIALS = {
    "X-Auth-Token": "secret-auth-token",
    "X-Amz-Security-Token": "secret-amz",
    "X-Forwarded-Authorization": "Bearer secret-forwarded",
    "X-CSRFToken": "secret-csrf",
    "X-Session-Id": "secret-session",
    "X-Client-Secret": "secret-client",
    "Authorization": "Token secret-token",
    "Cookie": "sessionid=secret-cookie",
    "X-Api-Key": "secret-key",
}
KEPT = {"X-Trace": "kept", "X-Platform": "ios"}
SNOOP = "/api/v1/core/workflows/snoop/instances"


def publish_snoop() -> None:
    """A parent whose subflow mapping hands every header it sees to the child as its data."""
    child = workflow([state("c", 1)], key="snooped")
    child["attributes"]["type"] = "S"
    subflow = {
        "type": "S",
        "process": {"key": "snooped", "domain": "core", "version": "1.0.0", "flow": "sys-flows"},
        "mapping": script(
            "def input_handler(context):\n"
            "    return ScriptResponse(data={'seen': dict(context.headers)})\n"
        ),
    }
    parent = workflow(
        [state("a", 1, [transition("go", "b")]), state("b", 4, subFlow=subflow)], key="snoop"
    )
    publish(child, parent)


def seen_by_the_script(client: Any) -> dict[str, str]:
    instance_id = client.post(f"{SNOOP}/start?sync=true", {}, format="json").json()["id"]
    answer = client.patch(
        f"{SNOOP}/{instance_id}/transitions/go?sync=true",
        {},
        format="json",
        headers={**CREDENTIALS, **KEPT},
    )
    assert answer.status_code == 200, answer.json()
    seen: dict[str, str] = Instance.objects.get(workflow_key="snooped").data["seen"]
    return seen


def test_credential_like_headers_never_reach_a_script(operator_client):
    publish_snoop()

    seen = seen_by_the_script(operator_client)

    assert {"x-trace": "kept", "x-platform": "ios"}.items() <= seen.items()
    assert not {name.lower() for name in CREDENTIALS} & set(seen)
    assert "secret" not in json.dumps(seen)


def test_credential_like_headers_never_reach_a_job_row(operator_client):
    publish(ping_pong())
    base = "/api/v1/core/workflows/ping-pong/instances"

    started = operator_client.post(
        f"{base}/start", {}, format="json", headers={**CREDENTIALS, **KEPT}
    )

    assert started.status_code == 202, started.json()
    [job] = Job.objects.filter(instance_id=started.json()["id"])
    assert job.payload["headers"]["x-trace"] == "kept"
    assert not {name.lower() for name in CREDENTIALS} & set(job.payload["headers"])
    assert "secret" not in json.dumps(job.payload)


def test_an_operators_patterns_replace_the_defaults_but_never_the_credential_headers(
    operator_client, settings
):
    settings.VNEXT = {**settings.VNEXT, "HEADER_DENY_PATTERNS": ["x-trace", "x-amz-*"]}
    publish_snoop()

    seen = seen_by_the_script(operator_client)

    assert "x-trace" not in seen
    assert "x-amz-security-token" not in seen
    assert seen["x-auth-token"] == "secret-auth-token"  # no longer a pattern of this list
    assert not {"authorization", "cookie", "x-api-key"} & set(seen)


@pytest.mark.parametrize(
    ("name", "denied"),
    [
        ("X-Auth-Token", True),
        ("x-amz-security-token", True),
        ("X-Forwarded-Authorization", True),
        ("X-CSRFToken", True),
        ("X-Session-Id", True),
        ("Proxy-Authorization", True),
        ("Cookie", True),
        ("X-Api-Key", True),
        ("X-Trace", False),
        ("Accept-Language", False),
        ("Content-Type", False),
    ],
)
def test_the_default_patterns_match_names_case_insensitively(name: str, denied: bool):
    assert HeaderDenyList.default().denies(name) is denied
