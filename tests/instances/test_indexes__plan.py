"""Search indexes on PostgreSQL: the indexes an `x-indexed` master-schema field gets (by its
declared type) and the instance columns get, as reviewed SQL (`manage.py indexes_plan`), and
`manage.py indexes_apply` building them with CREATE INDEX CONCURRENTLY — idempotent, an
invalid index left by an interrupted build rebuilt, obsolete ones dropped on request, one run
at a time, never inside a transaction."""

from __future__ import annotations

from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from instances import index_plans, indexes
from instances.filters.language import INSTANT_PATTERN
from instances.index_plans import ApplyRefused, IndexState, TrigramState, index_apply, index_plan
from instances.indexes import indexed_fields
from tests.instances.indexed import (
    DOMAIN,
    FIELDS,
    FLOW,
    drop_search_indexes,
    make_instances,
    publish_indexed,
    search_indexes,
)

pytestmark = [pytest.mark.postgres]
SCOPE = f"{DOMAIN}/{FLOW}"
INDEXES_OF_TEXT = [
    indexes.Access.VALUE,
    indexes.Access.SORT,
    indexes.Access.SORT_DESC,
    indexes.Access.TEXT,
]
STATISTICS_OF_TEXT = [
    "planner statistics: JSON types by workflow",
    "planner statistics: values",
    "planner statistics: texts",
]


@pytest.fixture
def built() -> Any:
    """Tests that build indexes drop them after: they outlive the flushed data."""
    yield
    drop_search_indexes()


def field_specs(plan: index_plans.IndexPlan) -> dict[tuple[str, str], index_plans.PlannedIndex]:
    return {
        (item.spec.target, str(item.spec.serves)): item
        for item in plan.indexes
        if item.spec.scope == SCOPE
    }


def test_the_indexed_fields_of_a_master_schema_by_declared_type():
    found = {field.name: field for field in indexed_fields({"properties": FIELDS})}

    assert list(found) == [
        "attributes.amount",
        "attributes.customer.id",
        "attributes.name",
        "attributes.when",
    ]  # `note` is not marked
    assert found["attributes.amount"].accesses == {
        indexes.Access.VALUE,
        indexes.Access.SORT,
        indexes.Access.SORT_DESC,
    }
    assert indexes.Access.TEXT in found["attributes.name"].accesses
    assert indexes.Access.TEXT in found["attributes.customer.id"].accesses  # ["string", "null"]
    assert found["attributes.when"].accesses == {
        indexes.Access.VALUE,
        indexes.Access.INSTANT,
        indexes.Access.SORT,
        indexes.Access.SORT_DESC,
    }
    # Marks under items or combinators are refused at publish; the plan ignores them.
    assert indexed_fields({"properties": {"a": {"items": {"x-indexed": True}}}}) == []
    assert indexed_fields({"x-indexed": True, "properties": {}}) == []


@pytest.mark.django_db
def test_the_index_a_field_gets_is_partial_on_its_workflow_and_reads_the_filters_expressions():
    publish_indexed()
    plan = index_plan([(DOMAIN, FLOW)])
    specs = field_specs(plan)
    value = specs[("attributes.amount", indexes.Access.VALUE)].spec
    ascending = specs[("attributes.amount", indexes.Access.SORT)].spec
    descending = specs[("attributes.amount", indexes.Access.SORT_DESC)].spec
    instant = specs[("attributes.when", indexes.Access.INSTANT)].spec
    text = specs[("attributes.name", indexes.Access.TEXT)].spec
    workflow_only = """WHERE ("domain" = 'core' AND "workflow_key" = 'pay')"""

    assert value.statements()[0] == (
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{value.name}" ON "instances_instance" '
        """USING btree ((COALESCE(JSONB_TYPEOF(("data" -> 'amount')), 'null')), """
        f"""(("data" -> 'amount'))) {workflow_only}"""
    )
    assert ascending.definition.endswith(f"""((("data" -> 'amount')), "id") {workflow_only}""")
    assert descending.definition.endswith(
        f"""((("data" -> 'amount')) DESC NULLS LAST, "id" DESC) {workflow_only}"""
    )
    assert instant.definition.endswith("""(vnext_instant(("data" ->> 'when')))) """ + workflow_only)
    assert text.definition == (
        """ON "instances_instance" USING gin ((UPPER(("data" ->> 'name'))) gin_trgm_ops) """
        + workflow_only
    )
    nested = specs[("attributes.customer.id", indexes.Access.VALUE)].spec
    assert """("data" #> '{customer,id}')""" in nested.definition
    # What each declared type gets: no trigram for a number or a date.
    assert {target for target, serves in specs if serves == indexes.Access.TEXT} == {
        "attributes.name",
        "attributes.customer.id",
    }
    assert {target for target, serves in specs if serves == indexes.Access.INSTANT} == {
        "attributes.when"
    }
    assert value.comment == f"vnext:{SCOPE}:attributes.amount:{indexes.Access.VALUE}"
    # The planner keeps no statistics on a partial index's expressions: the plan adds them,
    # table-wide (the JSON types jointly with the workflow), so it can tell a selective
    # condition from one most rows meet.
    statistics = {
        str(item.spec.serves): item.spec.definition
        for item in plan.indexes
        if item.spec.statistics and item.spec.target == "attributes.amount"
    }
    table = 'FROM "instances_instance"'
    assert statistics == {
        "planner statistics: JSON types by workflow": '(mcv) ON "domain", "workflow_key", '
        f"""(COALESCE(JSONB_TYPEOF(("data" -> 'amount')), 'null')) {table}""",
        "planner statistics: values": f"""ON (("data" -> 'amount')) {table}""",
    }
    # Deterministic names: the same plan again names every index the same.
    assert [item.spec.name for item in index_plan([(DOMAIN, FLOW)]).indexes] == [
        item.spec.name for item in plan.indexes
    ]
    assert len({item.spec.name for item in plan.indexes}) == len(plan.indexes)


@pytest.mark.django_db
def test_the_columns_get_indexes_every_workflow_shares_unless_a_model_index_serves_them():
    publish_indexed()
    plan = index_plan([(DOMAIN, FLOW)])
    columns = {
        (item.spec.target, item.spec.method): item.spec.definition
        for item in plan.indexes
        if item.spec.scope == indexes.ALL_WORKFLOWS and not item.spec.statistics
    }

    assert columns == {
        ("status", "btree"): 'ON "instances_instance" USING btree ("domain", "workflow_key", '
        '"status", "created_at", "id")',
        ("currentState", "btree"): 'ON "instances_instance" USING btree ("domain", '
        '"workflow_key", "current_state", "created_at", "id")',
        ("modifiedAt", "btree"): 'ON "instances_instance" USING btree ("domain", '
        '"workflow_key", "updated_at", "id")',
        ("completedAt", "btree"): 'ON "instances_instance" USING btree ("domain", '
        '"workflow_key", "completed_at" DESC NULLS LAST, "id" DESC)',
        ("key", "btree"): 'ON "instances_instance" USING btree ("domain", "workflow_key", '
        '"key", "id")',
        ("key", "gin"): 'ON "instances_instance" USING gin ((UPPER(("key")::text)) gin_trgm_ops)',
    }
    # The list's own index leads with (domain, workflow_key, created_at).
    assert plan.served == [("createdAt", "instance_list")]


@pytest.mark.django_db
def test_the_plan_prints_what_to_build_and_check_fails_until_it_is_built():
    publish_indexed()
    out = StringIO()
    call_command("indexes_plan", "--workflow", SCOPE, stdout=out)
    printed = out.getvalue()
    plan = index_plan([(DOMAIN, FLOW)])

    for item in plan.pending:
        assert f"{item.spec.statements()[0]};" in printed
        assert f"{item.spec.statements()[1]};" in printed
    assert f"-- {SCOPE} 1.0.0, master schema core/pay-master@1.0.0: x-indexed" in printed
    with pytest.raises(SystemExit) as exited:
        call_command("indexes_plan", "--check", stdout=StringIO())
    assert exited.value.code == 1
    with pytest.raises(CommandError, match="not published: core/nope"):
        call_command("indexes_plan", "--workflow", "core/nope", stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_apply_builds_every_index_concurrently_and_a_second_run_has_nothing_to_do(built):
    publish_indexed()
    make_instances(30)
    out = StringIO()
    call_command("indexes_apply", stdout=out)
    plan = index_plan()

    assert {item.state for item in plan.indexes} == {IndexState.PRESENT}
    assert set(search_indexes()) == {item.spec.name for item in plan.indexes}
    assert all(search_indexes().values())
    assert f"[1/{len(plan.indexes)}]" in out.getvalue()
    assert f"Built {len(plan.indexes)}, failed 0" in out.getvalue()
    assert "analysed instances_instance" in out.getvalue()  # the new statistics are filled
    again = StringIO()
    call_command("indexes_apply", stdout=again)
    assert again.getvalue().startswith("Nothing to build")
    call_command("indexes_plan", "--check", stdout=StringIO())  # exits 0: nothing pending


@pytest.mark.django_db(transaction=True)
def test_an_invalid_index_an_interrupted_build_left_is_rebuilt(built):
    publish_indexed()
    make_instances(5)
    [spec] = [
        item.spec
        for item in index_plan().indexes
        if item.spec.scope == SCOPE and item.spec.serves == indexes.Access.SORT
        if item.spec.target == "attributes.amount"
    ]
    # A concurrent build that fails half-way leaves its index behind, INVALID: a unique one
    # under the planned name, over a value five rows share.
    with (
        pytest.raises(IntegrityError, match="could not create unique index"),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f'CREATE UNIQUE INDEX CONCURRENTLY "{spec.name}" ON instances_instance ((workflow_key))'
        )
    assert search_indexes()[spec.name] is False
    state = {item.spec.name: item.state for item in index_plan().indexes}
    assert state[spec.name] is IndexState.INVALID

    out = StringIO()
    call_command("indexes_apply", stdout=out)

    assert search_indexes()[spec.name] is True
    assert "dropping the invalid index" in out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [spec.name])
        assert "UNIQUE" not in cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_indexes_a_new_version_no_longer_marks_are_obsolete_and_dropped_on_request(built):
    publish_indexed()
    call_command("indexes_apply", stdout=StringIO())
    unmarked = {**FIELDS, "name": {"type": "string"}}
    publish_indexed("1.1.0", unmarked)
    plan = index_plan()
    obsolete = {index.name: index.comment for index in plan.obsolete}

    # Its four indexes, and the statistics no other workflow's field needs.
    assert sorted(comment.split(":", 3)[1:] for comment in obsolete.values()) == sorted(
        [[SCOPE, "attributes.name", serves] for serves in INDEXES_OF_TEXT]
        + [["*", "attributes.name", serves] for serves in STATISTICS_OF_TEXT]
    )
    assert not plan.pending
    out = StringIO()
    call_command("indexes_plan", stdout=out)
    for name in obsolete:
        kind = "STATISTICS" if name.startswith("vnext_st_") else "INDEX CONCURRENTLY"
        assert f'-- DROP {kind} IF EXISTS "{name}";' in out.getvalue()

    call_command("indexes_apply", stdout=StringIO())  # without --drop-obsolete: kept
    assert set(obsolete) <= set(search_indexes())
    call_command("indexes_apply", "--drop-obsolete", stdout=StringIO())
    assert not set(obsolete) & set(search_indexes())
    assert index_plan().obsolete == []


@pytest.mark.django_db(transaction=True)
def test_without_pg_trgm_the_trigram_indexes_are_skipped_and_said_so(built, monkeypatch):
    monkeypatch.setattr(index_plans, "_trigram_state", lambda: TrigramState.UNAVAILABLE)
    publish_indexed()
    plan = index_plan()
    skipped = {item.spec.name for item in plan.indexes if item.state is IndexState.SKIPPED}
    out = StringIO()
    call_command("indexes_plan", stdout=out)

    assert skipped == {item.spec.name for item in plan.indexes if item.spec.trigram}
    assert len(skipped) == 3  # name, customer.id, key
    assert "pg_trgm: not available on this server" in out.getvalue()
    result = index_apply(plan, report=lambda line: None)
    assert set(result.skipped) == skipped
    assert set(search_indexes()) == {item.spec.name for item in plan.indexes} - skipped


@pytest.mark.django_db(transaction=True)
def test_apply_refuses_a_transaction_and_a_second_run_beside_the_first(built):
    publish_indexed()
    plan = index_plan()
    with transaction.atomic(), pytest.raises(ApplyRefused, match="transaction"):
        index_apply(plan, report=lambda line: None)

    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or None,
        autocommit=True,
    )
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [index_plans._APPLY_LOCK])
        with pytest.raises(ApplyRefused, match="another indexes_apply"):
            index_apply(plan, report=lambda line: None)
        # Released here: a closed connection's backend lets go of its locks a moment later.
        other.execute("SELECT pg_advisory_unlock(%s)", [index_plans._APPLY_LOCK])
    finally:
        other.close()
    assert search_indexes() == {}
    assert index_apply(plan, report=lambda line: None).failed == []


@pytest.mark.django_db
def test_the_instant_function_matches_the_query_languages_patterns():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef('vnext_instant(text)'::regprocedure)")
        [definition] = cursor.fetchone()
        cursor.execute(
            "SELECT vnext_instant('2024-02-29T12:00:00+03:00'), vnext_instant('2024-02-30'), "
            "vnext_instant('2024-01-01'), vnext_instant('a'), "
            "vnext_instant('2024-01-01T10:00:30.123456-01:30'), vnext_instant('2024-01-01 10:00Z')"
        )
        offset, impossible, midnight, text, west, zulu = cursor.fetchone()

    assert f"'^{INSTANT_PATTERN}$'" in definition
    assert offset.isoformat() == "2024-02-29T09:00:00+00:00"
    assert impossible is None
    assert text is None
    assert midnight.isoformat() == "2024-01-01T00:00:00+00:00"
    assert west.isoformat() == "2024-01-01T11:30:30.123456+00:00"
    assert zulu.isoformat() == "2024-01-01T10:00:00+00:00"
