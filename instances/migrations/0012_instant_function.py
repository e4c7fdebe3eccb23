"""`vnext_instant(text)`: the instant an ISO 8601 date or date-time string spells (no offset
means UTC), else NULL — what the query language compares a stored date string with a date
operand by (`instances.filters.sql`). Declared immutable, which it is: only strings of the
pattern reach the casts, and for those neither `TimeZone` (an offset is given, or UTC is
imposed) nor `DateStyle` (ISO 8601 is never ambiguous) changes the answer; so an index can
hold it (`manage.py indexes_plan`). PostgreSQL only; SQLite compares with `julianday`.

The pattern is `instances.filters.language.INSTANT_PATTERN` when this was written (a test
checks that they still agree). A string of it ends in an offset (`Z`, `+03:00`) when its last
character is `Z` or, past the minutes, its sixth from last is a sign: cheaper to ask than an
unanchored regex, which PostgreSQL tries at every position. Indexes hold its answers: a change
of what it answers needs a new function (and the indexes on it rebuilt), never a new body.
"""

from django.db import migrations

INSTANT_FUNCTION = r"""
CREATE OR REPLACE FUNCTION vnext_instant(value text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN value !~ '^(?:[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|[1-9][0-9](?:0[48]|[2468][048]|[13579][26])-02-29|(?:[2468][048]|[13579][26])00-02-29)(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{1,6})?)?(?:Z|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])?)?$' THEN NULL
        WHEN right(value, 1) = 'Z'
            OR (length(value) > 16 AND substr(value, length(value) - 5, 1) IN ('+', '-'))
            THEN value::timestamptz
        ELSE value::timestamp AT TIME ZONE 'UTC'
    END
$$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INSTANT_FUNCTION)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS vnext_instant(text)")


class Migration(migrations.Migration):
    dependencies = [("instances", "0010_transition_cancelled")]
    operations = [migrations.RunPython(create, drop)]
