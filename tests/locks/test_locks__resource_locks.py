"""Resource locks (seed 003) against PostgreSQL with real threads: one holder among racers,
409 `ResourceLockConflict` + Faulted for the rest, release on terminal status, TTL take-over,
Release and Extend semantics, key script errors."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from instances.models import Incident, Instance, InstanceTransition
from instances.operations import lock_force_release
from locks.models import ResourceLock
from locks.services import locks_sweep_expired
from locks.store import OrmLocks
from tests.conftest import EXAMPLES_DIR
from tests.instances.answers import fault

DAILY = "/api/v1/core/workflows/daily-limit-transfer/instances"
SEAT = "/api/v1/core/workflows/seat-reservation/instances"
ACCOUNT = {"accountId": "TR-001", "transactionDate": "2026-11-29"}
KEY = "daily-limit:TR-001:2026-11-29"


@pytest.fixture
def examples(db):
    call_command("import_components", str(EXAMPLES_DIR), "--no-progress", verbosity=0)


def start_daily(client: APIClient, data: dict[str, Any] | None = None) -> str:
    response = client.post(f"{DAILY}/start?sync=true", data or ACCOUNT, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["id"]


def fire(client: APIClient, instance_id: str, transition: str) -> Any:
    return client.patch(
        f"{DAILY}/{instance_id}/transitions/{transition}?sync=true", {}, format="json"
    )


@pytest.mark.postgres
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_fifty_instances_race_for_one_key(operator, operator_client, examples):
    instance_ids = [start_daily(operator_client) for _ in range(50)]
    barrier = threading.Barrier(50)
    results: dict[str, tuple[int, str | None]] = {}

    def reserve(instance_id: str) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            barrier.wait(timeout=30)
            response = fire(client, instance_id, "reserve-daily-limit")
            results[instance_id] = (response.status_code, response.json().get("errorCode"))
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve, args=(i,)) for i in instance_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert Counter(results.values()) == {(200, None): 1, (409, "ResourceLockConflict"): 49}
    [holder] = [i for i, (status, _) in results.items() if status == 200]
    lock = ResourceLock.objects.get(key=KEY)
    assert str(lock.owner) == holder
    assert Instance.objects.get(pk=holder).extra == {"resource.locks": [KEY]}
    losers = Instance.objects.exclude(pk=holder)
    assert set(losers.values_list("status", "current_state")) == {("F", "draft")}
    assert Incident.objects.filter(error_code="ResourceLockConflict").count() == 49

    # The holder completes: its lock goes with it, and a newcomer can take the key.
    assert fire(operator_client, holder, "complete").json()["status"] == "C"
    assert not ResourceLock.objects.filter(key=KEY).exists()
    newcomer = start_daily(operator_client)
    assert fire(operator_client, newcomer, "reserve-daily-limit").status_code == 200
    assert str(ResourceLock.objects.get(key=KEY).owner) == newcomer


@pytest.mark.django_db
@pytest.mark.parametrize("ending", ["cancel-transfer", "fault"])
def test_a_holder_that_is_cancelled_or_faults_releases_at_once(operator_client, examples, ending):
    holder = start_daily(operator_client)
    assert fire(operator_client, holder, "reserve-daily-limit").status_code == 200
    assert ResourceLock.objects.filter(owner=holder).exists()
    if ending == "fault":
        # Extend after the TTL passed and someone else took the key: the transition faults.
        ResourceLock.objects.filter(key=KEY).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        other = start_daily(operator_client)
        assert fire(operator_client, other, "reserve-daily-limit").status_code == 200
        ResourceLock.objects.create(
            key="unrelated:lock", owner=holder, expires_at=timezone.now() + timedelta(hours=1)
        )
        response = fire(operator_client, holder, "extend-limit")
        assert (response.status_code, response.json()["errorCode"]) == (409, "ResourceLockConflict")
        assert Instance.objects.get(pk=holder).status == "F"
    else:
        assert fire(operator_client, holder, "cancel-transfer").json()["status"] == "C"
    assert not ResourceLock.objects.filter(owner=holder).exists()


@pytest.mark.django_db
def test_expired_lock_is_taken_over_and_the_old_owner_cannot_release_or_extend_it():
    locks = OrmLocks()
    old, new = uuid.uuid4(), uuid.uuid4()
    assert locks.acquire("seat:e1:12", old, "reserve", 60)
    assert not locks.acquire("seat:e1:12", new, "reserve", 60)
    ResourceLock.objects.filter(key="seat:e1:12").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert locks.acquire("seat:e1:12", new, "reserve", 60)
    assert ResourceLock.objects.get(key="seat:e1:12").owner == new

    assert locks.release("seat:e1:12", old).value == "held_by_other"
    assert locks.extend("seat:e1:12", old, 600) is False
    assert ResourceLock.objects.get(key="seat:e1:12").owner == new
    assert locks.release("never:locked", old).value == "missing"


@pytest.mark.django_db
def test_extend_by_the_owner_moves_expiry_and_by_another_changes_nothing():
    locks = OrmLocks()
    owner, other = uuid.uuid4(), uuid.uuid4()
    assert locks.acquire("limit:a:1", owner, "reserve", 60)
    before = ResourceLock.objects.get(key="limit:a:1").expires_at
    assert locks.extend("limit:a:1", other, 3600) is False
    assert ResourceLock.objects.get(key="limit:a:1").expires_at == before
    assert locks.extend("limit:a:1", owner, 3600) is True
    after = ResourceLock.objects.get(key="limit:a:1").expires_at
    assert after - before > timedelta(minutes=50)


@pytest.mark.django_db
def test_release_through_a_transition_is_idempotent(operator_client, examples):
    holder = start_daily(operator_client)
    fire(operator_client, holder, "reserve-daily-limit")
    assert fire(operator_client, holder, "release-limit").status_code == 200
    assert not ResourceLock.objects.filter(key=KEY).exists()
    assert Instance.objects.get(pk=holder).extra == {"resource.locks": []}
    fire(operator_client, holder, "reserve-daily-limit")
    ResourceLock.objects.filter(key=KEY).delete()  # expired and swept meanwhile
    response = fire(operator_client, holder, "release-limit")
    assert (response.status_code, response.json()["status"]) == (200, "A")


@pytest.mark.django_db
def test_a_lock_on_the_start_transition_reserves_the_seat(operator_client, examples):
    seat = {"eventId": "concert-7", "seatNo": "A12"}
    first = operator_client.post(f"{SEAT}/start?sync=true", seat, format="json")
    assert first.status_code == 200
    second = operator_client.post(f"{SEAT}/start?sync=true", seat, format="json")
    assert (second.status_code, second.json()["errorCode"]) == (409, "ResourceLockConflict")
    assert Instance.objects.get(pk=second.json()["instanceId"]).status == "F"
    lock = ResourceLock.objects.get(key="seat:concert-7:A12")
    assert str(lock.owner) == first.json()["id"]
    assert lock.expires_at - lock.acquired_at == timedelta(seconds=1800)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("source", "code", "message"),
    [
        (
            "def handler(context):\n    return 42\n",
            "ResourceLock:InvalidKey",
            "returned int 42; it must return a non-empty string",
        ),
        (
            "def handler(context):\n    return ''\n",
            "ResourceLock:InvalidKey",
            "must return a non-empty string",
        ),
        (
            "def handler(context):\n    raise ValueError('no account')\n",
            "Script:100001",
            "line 2: ValueError: no account",
        ),
    ],
)
def test_a_bad_key_script_faults_the_transition_clearly(
    operator_client, examples, source, code, message
):
    from instances.wiring import engine
    from workflows.models import Component

    workflow = Component.objects.get(key="daily-limit-transfer")
    document = dict(workflow.document)
    expression = document["attributes"]["states"][0]["transitions"][0]["resourceLock"][
        "keyExpression"
    ]
    expression["code"] = source
    Component.objects.filter(pk=workflow.pk).delete()
    from workflows.services import component_publish

    component_publish(document=document)
    engine().components.clear()  # type: ignore[attr-defined]
    holder = start_daily(operator_client)
    response = fire(operator_client, holder, "reserve-daily-limit")
    error = fault(response)
    assert error["errorCode"] == code
    assert message in error["detail"]
    assert Instance.objects.get(pk=holder).status == "F"
    assert not ResourceLock.objects.exists()


@pytest.mark.django_db
def test_sweep_and_operator_force_release(operator_client, examples):
    holder = start_daily(operator_client)
    fire(operator_client, holder, "reserve-daily-limit")
    ResourceLock.objects.create(
        key="stale", owner=uuid.uuid4(), expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert locks_sweep_expired() == 1
    lock = ResourceLock.objects.get(key=KEY)
    lock_force_release(lock=lock, operator="alice")
    assert not ResourceLock.objects.exists()
    record = InstanceTransition.objects.get(
        instance_id=holder, transition_key="operator:force-release-lock"
    )
    assert (record.actor, record.body) == ("alice", {"lockKey": KEY})
    assert Instance.objects.get(pk=holder).extra == {"resource.locks": []}


def _locked_workflow(**boundary: Any) -> dict[str, Any]:
    # `hold` (automatic, default) acquires `seat:<n>` on the way to `holding`; `finish` ends it.
    from tests.engine.builders import script, state, transition, workflow

    key = script("def handler(context):\n    return 'seat:' + str(context.instance.data['n'])\n")
    hold = transition(
        "hold",
        "holding",
        1,
        triggerKind=10,
        resourceLock={"action": "Acquire", "keyExpression": key, "ttlSeconds": 60},
    )
    return workflow(
        [
            state("begin", 1, [hold]),
            state("holding", 2, [transition("finish", "done")], **boundary),
            state("done", 3, subType=1),
        ],
        key="auto-lock",
    )


def test_a_lock_on_an_automatic_transition_is_acquired_and_released_at_the_end(operator_client):
    from workflows.services import component_publish

    component_publish(document=_locked_workflow())
    base = "/api/v1/core/workflows/auto-lock/instances"
    started = operator_client.post(f"{base}/start?sync=true", {"n": 7}, format="json")
    assert started.status_code == 200, started.json()
    instance_id = started.json()["id"]
    lock = ResourceLock.objects.get(key="seat:7")
    assert str(lock.owner) == instance_id
    assert Instance.objects.get(pk=instance_id).extra["resource.locks"] == ["seat:7"]
    # A second instance's automatic hop conflicts: faulted with ResourceLockConflict.
    second = operator_client.post(f"{base}/start?sync=true", {"n": 7}, format="json")
    assert second.status_code == 409, second.json()
    assert second.json()["errorCode"] == "ResourceLockConflict"
    finished = operator_client.patch(
        f"{base}/{instance_id}/transitions/finish?sync=true", {}, format="json"
    )
    assert finished.status_code == 200, finished.json()
    assert not ResourceLock.objects.filter(key="seat:7").exists()


@pytest.mark.django_db
def test_a_lock_on_a_transition_an_error_boundary_runs_is_refused_at_publish():
    from instances.engine.errors import VNextError
    from workflows.services import component_publish

    document = _locked_workflow()
    states = document["attributes"]["states"]
    states[0]["errorBoundary"] = {
        "onError": [{"action": 2, "errorCodes": ["*"], "transition": "hold"}]
    }
    with pytest.raises(VNextError) as refused:
        component_publish(document=document)
    pointers = [violation.pointer for violation in refused.value.violations]
    assert "/attributes/states/0/transitions/0/resourceLock" in pointers
    message = next(
        v.message for v in refused.value.violations if v.pointer.endswith("/resourceLock")
    )
    assert "ErrorBoundary profile" in message
