"""Cron timers on PostgreSQL, with an injected clock: the engine's (`wiring.engine().clock`) and
the job queue's (`django.utils.timezone.now`) moved together, minute by minute.

A scheduled transition whose timer script returns `TimerSchedule.from_cron("* * * * *", ...)`
loops back to its own state: it fires at each wall-clock minute, keeps doing so after the
engine is rebuilt (a restart: nothing but the job row remembers the schedule), fires once for a
stretch of missed minutes and then goes on at the next future minute; the state function shows
the next occurrence and the schedule. A time zone moves the occurrence (`0 9 * * 1-5` in
Europe/Istanbul is 06:00 UTC), a daily time in a fall-back night fires once, and a bad
expression or zone is a script failure that names the problem."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from instances import wiring
from instances.job_handlers import jobs_run_due
from instances.job_table import Job
from instances.models import Instance
from instances.status import JobStatus
from tests.engine.builders import script, state, transition, workflow
from tests.instances.scenario_api import at, scheduled
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db

BASE = "/api/v1/core/workflows/{key}/instances"
# A Friday, 10:00:20 UTC.
T0 = datetime(2030, 3, 1, 10, 0, 20, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


class Clock:
    """The one clock of the engine and of the job queue in these tests."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock(T0)
    monkeypatch.setattr(timezone, "now", fake)
    restart(fake)
    yield fake
    wiring.engine.cache_clear()


def restart(clock: Clock) -> None:
    """A new process: the engine (and its wiring) built again, knowing nothing of the timers."""
    wiring.engine.cache_clear()
    wiring.engine().clock = clock


def ticking(
    cron: str = "* * * * *",
    zone: str = "Europe/Istanbul",
    key: str = "ticking",
    computed: bool = False,
) -> Any:
    """`ticking` loops to itself at every occurrence of `cron`; `stop` ends it. A `computed`
    schedule is not literal text in the script, so only the run checks it."""
    arguments = f"str({cron!r}), str({zone!r})" if computed else f"{cron!r}, {zone!r}"
    timer = script(f"def handler(context):\n    return TimerSchedule.from_cron({arguments})\n")
    return workflow(
        [
            state(
                "ticking",
                1,
                [
                    transition("tick", "ticking", 2, timer=timer),
                    transition("stop", "stopped"),
                ],
            ),
            state("stopped", 3, subType=1),
        ],
        key=key,
    )


def start(client: Any, key: str = "ticking") -> str:
    response = client.post(f"{BASE.format(key=key)}/start?sync=true", {}, format="json")
    assert response.status_code == 200, response.json()
    return str(response.json()["id"])


def fire_times(instance_id: str) -> list[datetime]:
    """When each `tick` ran, from the instance's history."""
    rows = Instance.objects.get(pk=instance_id).transitions.filter(transition_key="tick")
    return sorted(row.started_at for row in rows)


def pending_timer(instance_id: str) -> Job:
    (job,) = Job.objects.filter(instance_id=instance_id, kind="timer", status=JobStatus.PENDING)
    return job


def minute(n: int, second: int = 0) -> datetime:
    """10:00 UTC plus `n` minutes (and `second` seconds), the day of T0."""
    return T0.replace(second=second) + n * MINUTE


def test_every_minute_fires_on_the_minute_across_a_restart_and_catches_up_once(
    clock, operator_client
):
    publish(ticking())
    instance_id = start(operator_client)
    job = pending_timer(instance_id)
    assert job.run_at == minute(1)
    assert job.payload == {
        "transition": "tick",
        "state": "ticking",
        "cron": "* * * * *",
        "timeZone": "Europe/Istanbul",
        "occurrence": minute(1).isoformat(),
    }

    # The runner wakes every minute, 5 s past it: each minute fires once, the next one armed.
    for n in (1, 2, 3):
        clock.now = minute(n, second=5)
        assert jobs_run_due() == {"succeeded": 1}
        assert pending_timer(instance_id).run_at == minute(n + 1)
    clock.now = minute(3, second=40)
    assert jobs_run_due() == {}

    restart(clock)
    clock.now = minute(4, second=5)
    assert jobs_run_due() == {"succeeded": 1}
    assert pending_timer(instance_id).run_at == minute(5)

    # Down from 10:04:05 to 10:09:30: the 10:05 timer fires once, late; the next is 10:10.
    restart(clock)
    clock.now = minute(9, second=30)
    assert jobs_run_due() == {"succeeded": 1}
    assert jobs_run_due() == {}
    assert pending_timer(instance_id).run_at == minute(10)
    clock.now = minute(10, second=5)
    assert jobs_run_due() == {"succeeded": 1}

    assert fire_times(instance_id) == [
        minute(1, 5),
        minute(2, 5),
        minute(3, 5),
        minute(4, 5),
        minute(9, 30),
        minute(10, 5),
    ]
    assert Job.objects.filter(instance_id=instance_id, kind="timer").count() == 7
    assert pending_timer(instance_id).run_at == minute(11)


def test_a_job_run_before_its_minute_by_a_lagging_clock_arms_the_next_minute(
    clock, operator_client
):
    publish(ticking())
    instance_id = start(operator_client)
    job = pending_timer(instance_id)

    # The queue finds it due, but the engine's clock is 3 s behind: 10:00:57.
    clock.now = minute(1)
    Job.objects.filter(pk=job.pk).update(run_at=minute(0, 50))
    wiring.engine().clock = lambda: minute(0, 57)
    assert jobs_run_due() == {"succeeded": 1}

    # From the occurrence it fired for (10:01), not from the lagging now (which gives 10:01).
    assert pending_timer(instance_id).run_at == minute(2)


def test_the_state_function_shows_the_next_occurrence_and_the_schedule(clock, operator_client):
    publish(ticking("0 9 * * 1-5", "Europe/Istanbul"))
    instance_id = start(operator_client)

    body = operator_client.get(f"{BASE.format(key='ticking')}/{instance_id}/functions/state")

    assert body.status_code == 200
    (tick,) = scheduled(body.json())
    # Friday 10:00 UTC is 13:00 in Istanbul (UTC+3): the next weekday 09:00 is Monday, 06:00 UTC.
    assert at(tick["executeAtUtc"]) == datetime(2030, 3, 4, 6, 0, tzinfo=UTC)
    assert tick["cron"] == {"expression": "0 9 * * 1-5", "timeZone": "Europe/Istanbul"}
    assert tick["name"] == "tick"

    clock.now = datetime(2030, 3, 4, 6, 0, 1, tzinfo=UTC)
    assert jobs_run_due() == {"succeeded": 1}
    body = operator_client.get(f"{BASE.format(key='ticking')}/{instance_id}/functions/state")
    (tick,) = scheduled(body.json())
    assert at(tick["executeAtUtc"]) == datetime(2030, 3, 5, 6, 0, tzinfo=UTC)


def test_a_daily_time_in_the_fall_back_hour_fires_once_that_night(clock, operator_client):
    # Berlin leaves summer time on 27 October 2030: 03:00 CEST becomes 02:00 CET again.
    clock.now = datetime(2030, 10, 26, 12, 0, tzinfo=UTC)
    publish(ticking("30 2 * * *", "Europe/Berlin"))
    instance_id = start(operator_client)
    assert pending_timer(instance_id).run_at == datetime(2030, 10, 27, 0, 30, tzinfo=UTC)

    clock.now = datetime(2030, 10, 27, 0, 30, 5, tzinfo=UTC)
    assert jobs_run_due() == {"succeeded": 1}

    # 02:30 CET (01:30 UTC) is the same wall-clock time again: the next is the next night.
    assert pending_timer(instance_id).run_at == datetime(2030, 10, 28, 1, 30, tzinfo=UTC)


def test_a_bad_cron_expression_or_zone_faults_the_start_with_the_reason(clock, operator_client):
    publish(ticking("61 * * * *", "UTC", key="bad-minute", computed=True))
    publish(ticking("* * * * *", "Mars/Olympus", key="bad-zone", computed=True))
    publish(ticking("0 0 * * * *", "UTC", key="six-fields", computed=True))

    for key, reason in (
        ("bad-minute", "invalid cron expression '61 * * * *'"),
        ("bad-zone", "unknown time zone 'Mars/Olympus'"),
        ("six-fields", "has 6 fields; use five"),
    ):
        url = f"{BASE.format(key=key)}/start?sync=true"
        response = operator_client.post(url, {}, format="json")
        assert response.status_code == 200, response.json()
        instance = Instance.objects.get(pk=response.json()["id"])
        assert instance.status == "F", key
        incident = instance.incidents.get()
        assert incident.error_code == "Script:100001", key
        assert reason in incident.message, (key, incident.message)
        assert not Job.objects.filter(instance_id=instance.pk, kind="timer").exists()


def test_the_admin_inspector_shows_the_schedule_in_words(clock, operator_client, admin_client):
    publish(ticking())
    instance_id = start(operator_client)

    page = admin_client.get(reverse("admin:instances_instance_change", args=[instance_id]))

    assert page.status_code == 200
    html = page.content.decode()
    assert "cron <code>* * * * *</code> (Europe/Istanbul): Every minute" in html


def office_hours_timeout(target: str) -> Any:
    """A workflow timeout whose mapping answers with a cron: every weekday at 18:00 Istanbul."""
    mapping = script(
        "def handler(context):\n"
        "    return TimerSchedule.from_cron('0 18 * * 1-5', 'Europe/Istanbul')\n"
    )
    return workflow(
        [
            state("open", 1, [transition("close", "closed")]),
            state("escalated", 2, [transition("close", "closed")]),
            state("closed", 3, subType=1),
        ],
        key="office-hours",
        timeout={
            "key": "end-of-day",
            "target": target,
            "versionStrategy": "None",
            "timer": {"reset": "None", "duration": "PT8H"},
            "mapping": mapping,
        },
    )


def test_a_cron_workflow_timeout_is_shown_and_re_armed_after_it_fires(clock, operator_client):
    publish(office_hours_timeout("escalated"))
    instance_id = start(operator_client, key="office-hours")
    # Friday 10:00:20 UTC is 13:00 in Istanbul: 18:00 there is 15:00 UTC.
    first = datetime(2030, 3, 1, 15, 0, tzinfo=UTC)
    url = f"{BASE.format(key='office-hours')}/{instance_id}/functions/state"
    timeout = operator_client.get(url).json()["timeout"]
    assert at(timeout["executeAtUtc"]) == first
    assert timeout["cron"] == {"expression": "0 18 * * 1-5", "timeZone": "Europe/Istanbul"}

    clock.now = first + timedelta(seconds=3)
    assert jobs_run_due() == {"succeeded": 1}

    instance = Instance.objects.get(pk=instance_id)
    assert (instance.status, instance.current_state) == ("A", "escalated")
    # Re-armed from the payload: Monday 18:00 Istanbul.
    (job,) = Job.objects.filter(instance_id=instance_id, kind="timeout", status=JobStatus.PENDING)
    assert job.run_at == datetime(2030, 3, 4, 15, 0, tzinfo=UTC)
    timeout = operator_client.get(url).json()["timeout"]
    assert at(timeout["executeAtUtc"]) == job.run_at


def test_a_literal_bad_cron_is_refused_at_publish(operator_client):
    response = operator_client.post(
        "/api/v1/definitions/publish", ticking("0 9 * * 1-5", "Europe/Ankara"), format="json"
    )

    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["pointer"] == "/attributes/states/0/transitions/0/timer/code"
    assert error["message"].startswith("line 2: unknown time zone 'Europe/Ankara'")


def test_a_migration_keeps_a_cron_timers_schedule_and_arms_the_targets_with_theirs(
    clock, operator_client
):
    publish(ticking())
    instance_id = start(operator_client)
    kept_before = pending_timer(instance_id).payload
    target = ticking()
    target["version"] = "1.1.0"
    hourly = script(
        "def handler(context):\n    return TimerSchedule.from_cron('0 * * * *', 'UTC')\n"
    )
    target["attributes"]["states"][0]["transitions"].append(
        transition("chime", "ticking", 2, timer=hourly)
    )
    publish(target)

    migrated = operator_client.post(
        f"{BASE.format(key='ticking')}/{instance_id}/migrate",
        {"targetVersion": "1.1.0"},
        format="json",
    )

    assert migrated.status_code == 200, migrated.json()
    timers = {
        job.payload["transition"]: job
        for job in Job.objects.filter(
            instance_id=instance_id, kind="timer", status=JobStatus.PENDING
        )
    }
    # The kept timer is the same job, its schedule and occurrence with it.
    assert timers["tick"].payload == kept_before
    # The target's new timer is armed at its next occurrence, its schedule in its payload.
    assert timers["chime"].run_at == datetime(2030, 3, 1, 11, 0, tzinfo=UTC)
    assert timers["chime"].payload == {
        "transition": "chime",
        "state": "ticking",
        "cron": "0 * * * *",
        "timeZone": "UTC",
        "occurrence": datetime(2030, 3, 1, 11, 0, tzinfo=UTC).isoformat(),
    }
    clock.now = minute(1, second=5)
    assert jobs_run_due() == {"succeeded": 1}
    assert pending_timer_of(instance_id, "tick").run_at == minute(2)


def pending_timer_of(instance_id: str, transition_key: str) -> Job:
    (job,) = (
        job
        for job in Job.objects.filter(
            instance_id=instance_id, kind="timer", status=JobStatus.PENDING
        )
        if job.payload["transition"] == transition_key
    )
    return job
