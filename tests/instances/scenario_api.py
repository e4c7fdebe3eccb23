"""The plumbing the scenario tests (`test_scenarios__*.py`) share: one workflow's instance API as
a client calls it (`WorkflowApi`), the autouse fixture that imports `examples/` and hands a test
that API (`api_fixture`), and helpers for the `Job` rows timers leave and for response bodies.

pytest does not rewrite the asserts of this module, so each one carries its own message."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from instances.job_table import Job
from tests.conftest import EXAMPLES_DIR
from workflows.models import Component

if TYPE_CHECKING:
    from _pytest.fixtures import FixtureFunctionDefinition

# Fields of a history row, in the order `WorkflowApi.history` and `.audit` put them in a tuple.
HOP = ("transitionKey", "fromState", "toState")
STATUS = (*HOP, "status")
TRIGGER = (*HOP, "triggerType", "actor")
FULL = (*HOP, "status", "triggerType", "actor")


class WorkflowApi:
    """The instance endpoints of `domain`/`workflow`, called through `client`; `history` and
    `audit` name the fields of the rows the methods of those names return."""

    def __init__(
        self,
        client: APIClient,
        workflow: str,
        domain: str = "core",
        *,
        history: tuple[str, ...] = STATUS,
        audit: tuple[str, ...] = FULL,
    ) -> None:
        self.client = client
        self.base = f"/api/v1/{domain}/workflows/{workflow}/instances"
        self.history_fields = history
        self.audit_fields = audit

    def url(self, *parts: str) -> str:
        """The instances URL with `parts` as further path segments."""
        return "/".join((self.base, *parts))

    def start(
        self, body: Any = None, *, sync: bool = True, headers: dict[str, str] | None = None
    ) -> Any:
        """POST `body` (`{}` when None) to `start`, as is: the response."""
        url = self.url("start") + ("?sync=true" if sync else "")
        return self.client.post(url, {} if body is None else body, format="json", headers=headers)

    def started(self, body: Any = None) -> str:
        """Start synchronously, expecting 200: the new (or existing) instance's id."""
        response = self.start(body)
        assert response.status_code == 200, response.json()
        return str(response.json()["id"])

    def fire(
        self,
        ref: str,
        transition: str,
        body: Any = None,
        *,
        sync: bool = True,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """PATCH `body` (`{}` when None) to the instance's `transition`: the response."""
        url = self.url(ref, "transitions", transition) + ("?sync=true" if sync else "")
        return self.client.patch(url, {} if body is None else body, format="json", headers=headers)

    def fired(self, ref: str, transition: str, body: Any = None) -> dict[str, Any]:
        """Fire synchronously, expecting 200: the answer's body."""
        response = self.fire(ref, transition, body)
        assert response.status_code == 200, response.json()
        answer: dict[str, Any] = response.json()
        return answer

    def detail(self, ref: str) -> dict[str, Any]:
        """The instance (by id or key), expecting 200."""
        response = self.client.get(self.url(ref))
        assert response.status_code == 200, response.content
        body: dict[str, Any] = response.json()
        return body

    def function(self, ref: str, name: str, *, headers: dict[str, str] | None = None) -> Any:
        """GET the instance's function `name` (`data`, `state`): the response."""
        return self.client.get(self.url(ref, "functions", name), headers=headers)

    def state(self, ref: str) -> dict[str, Any]:
        """The instance's state function, expecting 200."""
        response = self.function(ref, "state")
        assert response.status_code == 200, response.content
        body: dict[str, Any] = response.json()
        return body

    def transitions(self, ref: str) -> list[dict[str, Any]]:
        """The instance's history rows, as the API sends them."""
        items: list[dict[str, Any]] = self.client.get(self.url(ref, "transitions")).json()["items"]
        return items

    def history(self, ref: str) -> list[tuple[Any, ...]]:
        """The history rows as tuples of the `history` fields."""
        return [tuple(row[field] for field in self.history_fields) for row in self.transitions(ref)]

    def audit(self, ref: str) -> list[tuple[Any, ...]]:
        """The history rows as tuples of the `audit` fields (by default with status, trigger
        type and actor)."""
        return [tuple(row[field] for field in self.audit_fields) for row in self.transitions(ref)]

    def listing(self, **params: str) -> dict[str, Any]:
        """A page of the workflow's instances, expecting 200."""
        response = self.client.get(self.base, params)
        assert response.status_code == 200, response.json()
        body: dict[str, Any] = response.json()
        return body


_EXAMPLE_ROWS: list[dict[str, Any]] = []


def import_examples() -> None:
    """Import the components under `examples/` (the scenario workflows).

    The first import in a session validates and publishes them (`import_components`); its rows
    are remembered, and a later call on a database without components inserts the same rows
    (what publishing them again would write), which saves the validation in every test."""
    if _EXAMPLE_ROWS and not Component.objects.exists():
        Component.objects.bulk_create(Component(**row) for row in _EXAMPLE_ROWS)
        return
    empty = not Component.objects.exists()
    call_command("import_components", str(EXAMPLES_DIR), "--no-progress")
    if empty and not _EXAMPLE_ROWS:
        _EXAMPLE_ROWS.extend(
            {name: value for name, value in row.items() if name != "id"}
            for row in Component.objects.values()
        )


def api_fixture(
    workflow: str, domain: str = "core", **fields: tuple[str, ...]
) -> FixtureFunctionDefinition:
    """An autouse fixture `api` for a test module (`api = api_fixture("my-flow")`): imports
    `examples/` and gives the test `WorkflowApi(operator_client, workflow, domain, **fields)`."""

    @pytest.fixture(autouse=True, name="api")
    def api(db: None, operator_client: APIClient) -> WorkflowApi:
        import_examples()
        return WorkflowApi(operator_client, workflow, domain, **fields)

    return api


def timers(instance_id: str, kind: str = "timer") -> list[Job]:
    """The instance's `Job` rows of `kind` (`timer`, `timeout`), oldest first."""
    return list(Job.objects.filter(instance_id=instance_id, kind=kind).order_by("pk"))


def make_due(job: Job, *, ago: timedelta = timedelta(0)) -> None:
    """Move `job`'s `run_at` to `ago` before now, so `jobs_run_due()` picks it."""
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - ago)


def scheduled(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The scheduled transitions a state function body lists."""
    return [t for t in state["transitions"] if t.get("kind") == "scheduled"]


def at(text: str) -> datetime:
    """An ISO timestamp (a trailing `Z` allowed) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ids(page: dict[str, Any]) -> list[str]:
    """The ids of a listing page's items, in order."""
    return [item["id"] for item in page["items"]]


def pointers(response: Any) -> dict[str, str]:
    """The field-level errors of a 400 `App:900002` body, by pointer."""
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["errorCode"] == "App:900002", body
    assert body["status"] == 400, body
    return {error["pointer"]: error["message"] for error in body["errors"]}
