"""Cron schedules without a database: next occurrences in a zone across both DST changes, what is
refused and why, the schedule across the script worker's JSON wire, and the publish-time check
of a literal `TimerSchedule.from_cron(...)`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from instances.engine.cron import CronError, cron_next, static_cron_problems
from instances.engine.errors import VNextError
from instances.engine.script_wire import decode_result, encode_result
from instances.engine.scripts import CronSchedule, ScriptResponse, TimerSchedule
from instances.engine.timers import TimerArm, cron_rearmed, timer_arm
from instances.job_payloads import TimerJob


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def occurrences(schedule: CronSchedule, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = cron_next(schedule, after)
        found.append(after)
    return found


def test_weekday_mornings_in_istanbul_are_six_utc():
    schedule = TimerSchedule.from_cron("0 9 * * 1-5", "Europe/Istanbul")
    # Friday noon UTC: the next three are Monday to Wednesday.
    assert occurrences(schedule, utc(2030, 3, 1, 12), 3) == [
        utc(2030, 3, 4, 6),
        utc(2030, 3, 5, 6),
        utc(2030, 3, 6, 6),
    ]


def test_the_spring_forward_gap_fires_once_at_its_end():
    # Berlin, 31 March 2030: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that night.
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    assert occurrences(schedule, utc(2030, 3, 30, 12), 3) == [
        utc(2030, 3, 31, 1),  # 03:00 CEST
        utc(2030, 4, 1, 0, 30),  # 02:30 CEST
        utc(2030, 4, 2, 0, 30),
    ]


def test_the_fall_back_hour_repeats_only_for_hourly_schedules():
    # Berlin, 27 October 2030: 03:00 CEST goes back to 02:00 CET.
    daily = CronSchedule("30 2 * * *", "Europe/Berlin")
    assert occurrences(daily, utc(2030, 10, 26, 12), 2) == [
        utc(2030, 10, 27, 0, 30),  # 02:30 CEST, once
        utc(2030, 10, 28, 1, 30),  # 02:30 CET the next night
    ]
    half_hourly = CronSchedule("*/30 * * * *", "Europe/Berlin")
    # Every 30 minutes of elapsed time, through both passes of 02:00-03:00.
    assert occurrences(half_hourly, utc(2030, 10, 27, 0, 0), 4) == [
        utc(2030, 10, 27, 0, 30),
        utc(2030, 10, 27, 1, 0),
        utc(2030, 10, 27, 1, 30),
        utc(2030, 10, 27, 2, 0),
    ]


def test_month_and_day_names_are_not_taken_for_random_values():
    due = cron_next(CronSchedule("0 9 * MAR FRI", "UTC"), utc(2030, 1, 1))
    assert due == utc(2030, 3, 1, 9)


def test_nicknames_and_whitespace_are_read():
    assert cron_next(CronSchedule("@daily", "UTC"), utc(2030, 1, 1, 5)) == utc(2030, 1, 2)
    assert cron_next(CronSchedule("  */15   *  * * * "), utc(2030, 1, 1, 5, 1)) == utc(
        2030, 1, 1, 5, 15
    )


@pytest.mark.parametrize(
    ("expression", "zone", "reason"),
    [
        ("61 * * * *", "UTC", "invalid cron expression '61 * * * *'"),
        ("* * *", "UTC", "has 3 fields; use five"),
        ("0 0 * * * *", "UTC", "has 6 fields; use five"),
        ("@sometimes", "UTC", "unknown cron nickname '@sometimes'"),
        ("", "UTC", "needs an expression"),
        ("* * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("* * * * *", "", "must be an IANA name"),
        ("0 0 30 2 *", "UTC", "has no next occurrence"),
        ("R R * * *", "UTC", "random values (R) are not supported"),
        ("0 " + "1," * 200 + "2 * * *", "UTC", "at most 256 characters"),
    ],
)
def test_a_bad_schedule_is_refused_with_the_reason(expression, zone, reason):
    with pytest.raises(CronError) as refused:
        cron_next(CronSchedule(expression, zone), utc(2030, 1, 1))
    assert reason in str(refused.value)
    with pytest.raises(VNextError) as failed:
        timer_arm(CronSchedule(expression, zone), utc(2030, 1, 1))
    assert failed.value.code == "Script:100001"
    assert reason in str(failed.value)


def test_the_schedule_crosses_the_wire_bare_and_inside_a_response():
    schedule = TimerSchedule.from_cron_expression("0 9 * * 1-5", "Europe/Istanbul")
    assert decode_result(encode_result(schedule)) == schedule
    inside = decode_result(encode_result(ScriptResponse(data=schedule)))
    assert inside.data == {"cron": "0 9 * * 1-5", "timeZone": "Europe/Istanbul"}
    # Either form arms the same occurrence.
    now = utc(2030, 3, 1, 12)
    assert (
        timer_arm(inside, now) == timer_arm(schedule, now) == TimerArm(utc(2030, 3, 4, 6), schedule)
    )


def test_the_other_builders_answer_what_timers_always_took():
    now = utc(2030, 1, 1)
    assert timer_arm(TimerSchedule.from_duration("PT5M"), now) == TimerArm(utc(2030, 1, 1, 0, 5))
    assert timer_arm(TimerSchedule.immediate(), now) == TimerArm(now)
    moment = utc(2030, 2, 1)
    assert timer_arm(TimerSchedule.from_date_time(moment), now) == TimerArm(moment)
    with pytest.raises(TypeError):
        TimerSchedule.from_date_time(moment.replace(tzinfo=None))
    with pytest.raises(TypeError):
        TimerSchedule.from_cron(5)  # type: ignore[arg-type]


TEN = ("*/10 * * * *", "UTC")


def test_re_arming_counts_from_the_occurrence_and_skips_what_was_missed():
    fired = TimerJob(
        "tick",
        state="s",
        cron="*/10 * * * *",
        time_zone="UTC",
        occurrence="2030-01-01T10:10:00+00:00",
    )
    # Run on time, a little early or a little late: the next is 10:20.
    for now in (utc(2030, 1, 1, 10, 9, 58), utc(2030, 1, 1, 10, 10, 4), utc(2030, 1, 1, 10, 19)):
        assert cron_rearmed(fired, now) == TimerArm(utc(2030, 1, 1, 10, 20), CronSchedule(*TEN))
    # Run 45 minutes late: 10:20, 10:30 and 10:50 are not fired as a burst; the next is 11:00.
    late = cron_rearmed(fired, utc(2030, 1, 1, 10, 55))
    assert late == TimerArm(utc(2030, 1, 1, 11, 0), CronSchedule(*TEN))
    assert cron_rearmed(TimerJob("tick", state="s"), utc(2030, 1, 1)) is None


def test_a_literal_schedule_is_checked_at_publish_a_computed_one_is_not():
    source = (
        "def handler(context):\n"
        "    if context.instance.data.get('fast'):\n"
        "        return TimerSchedule.from_cron('*/5 * * * *', 'UTC')\n"
        "    if context.instance.data.get('bad'):\n"
        "        return TimerSchedule.from_cron('0 25 * * *', 'Europe/Istanbul')\n"
        "    if context.instance.data.get('zone'):\n"
        "        return TimerSchedule.from_cron_expression('0 9 * * *', time_zone='Asia/Ankara')\n"
        "    return TimerSchedule.from_cron(context.instance.data['cron'], 'UTC')\n"
    )
    assert static_cron_problems(source) == [
        (5, "invalid cron expression '0 25 * * *': [0 25 * * *] is not acceptable, out of range"),
        (
            7,
            "unknown time zone 'Asia/Ankara'; use an IANA name such as 'Europe/Istanbul' or 'UTC'",
        ),
    ]
