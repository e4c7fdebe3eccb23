"""`vnext_jsonb_merge(target, patch)`: the deep merge instance data patches are applied with, in
one UPDATE, so parallel writers (updateData) never lose each other's keys. PostgreSQL only; the
SQLite store merges in Python."""

from django.db import migrations

MERGE_FUNCTION = """
CREATE OR REPLACE FUNCTION vnext_jsonb_merge(target jsonb, patch jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    result jsonb;
    item record;
BEGIN
    IF target IS NULL OR jsonb_typeof(target) <> 'object' OR jsonb_typeof(patch) <> 'object' THEN
        RETURN patch;
    END IF;
    result := target;
    FOR item IN SELECT key, value FROM jsonb_each(patch) LOOP
        IF jsonb_typeof(item.value) = 'object' AND jsonb_typeof(result -> item.key) = 'object' THEN
            result := jsonb_set(result, ARRAY[item.key],
                                vnext_jsonb_merge(result -> item.key, item.value));
        ELSE
            result := jsonb_set(result, ARRAY[item.key], item.value, true);
        END IF;
    END LOOP;
    RETURN result;
END;
$$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(MERGE_FUNCTION)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS vnext_jsonb_merge(jsonb, jsonb)")


class Migration(migrations.Migration):
    dependencies = [("instances", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
