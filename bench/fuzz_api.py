"""Fuzz the API against its OpenAPI document with schemathesis: every operation of
`/api/schema/`, valid (positive) and invalid (negative) requests, with random path parameters and
with ones naming real things; every check of schemathesis on every answer (no server error,
documented status, content type, headers and body, invalid input refused, valid input accepted,
credentials required). The test suite runs a bounded pass (`tests/site/test_openapi__
schemathesis.py`); `python -m bench fuzz` runs at least 5,000 cases.

The requests reach Django through WSGI in-process, as the given credentials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
)

# API.md answers 400 (not 409) when the instance's state refuses a well-formed request, as vNext
# does: a schema cannot say which state an instance is in.
STATE_REFUSALS = {"Instance:100018", "Instance:100027", "Transition:100020"}
# Whether a workflow takes events is in its definition, which a schema cannot see either.
DEFINITION_REFUSALS = {"NotAnEventTransition"}
# Query parameters required only with another one's value (events: `transitionKey` with
# `action=transition`; a batch's `targetVersion` with `operation: migrate`), which OpenAPI
# parameters cannot say.
CONDITIONALLY_REQUIRED = {"/transitionKey", "/targetVersion"}
# A migration's answer depends on which versions are published and which states they have.
MIGRATION_REFUSALS = {"Migration:SameVersion", "Migration:InvalidMapping"}


def excused(case: Any, response: Any) -> list[Any]:
    """The checks a case is excused from, each for a reason the schema cannot carry. The
    reasons add up: a free payload carrying a NUL is excused from both checks."""
    checks: list[Any] = []
    if {"filter", "sort", "orderBy", "groupBy", "aggregations"} & set(case.query or {}):
        # JSON documents in a query string: their grammar is beyond a JSON Schema string, and
        # a random string is rightly 400 `invalid_filter`.
        checks.append(positive_data_acceptance)
    code = _error_code(response) if response.status_code == 400 else None
    if code in STATE_REFUSALS or code in DEFINITION_REFUSALS or code in MIGRATION_REFUSALS:
        checks.append(positive_data_acceptance)
    if isinstance(case.body, dict) and "filter" in case.body:
        # A batch's filter: the list API's filter language in a JSON body (as in the query).
        checks.append(positive_data_acceptance)
    if (
        code == "App:900002"
        and _pointers(response)
        and _pointers(response) <= CONDITIONALLY_REQUIRED
    ):
        checks.append(positive_data_acceptance)
    if code == "App:900006":
        # A definition is checked against the vnext-schema of its kind and the semantic rules
        # (API.md 4); the request schema only names the document's envelope.
        checks.append(positive_data_acceptance)
    if _is_form(case):
        # On the wire every form value is text: a "wrongly typed" value cannot be told from a
        # string. And the bracket-path grammar (a field both a value and an object, index gaps)
        # is beyond what a JSON Schema of flat fields can say.
        checks.append(negative_data_rejection)
        if code == "App:900002" and _detail(response) == FORM_REFUSAL:
            checks.append(positive_data_acceptance)
    if _free_payload(case):
        # A body that is not the standard envelope is the data itself (API.md 1): its `tags` or
        # `stage` are data fields, not envelope fields the schema types.
        checks.append(negative_data_rejection)
    sent = (case.body, case.query, case.path_parameters, case.headers)
    if response.status_code == 400 and any(_unstorable(value) for value in sent):
        # JSON allows NUL and lone surrogates; PostgreSQL text and jsonb cannot hold them, so
        # the API refuses them with 400.
        checks.append(positive_data_acceptance)
    return list(dict.fromkeys(checks))


ENVELOPE_KEYS = {"key", "tags", "attributes", "stage"}
FORM = "application/x-www-form-urlencoded"
FORM_REFUSAL = "The form body is invalid."


def _is_form(case: Any) -> bool:
    return str(getattr(case, "media_type", "") or "").startswith(FORM)


def _detail(response: Any) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return str(body.get("detail")) if isinstance(body, dict) else None


def _free_payload(case: Any) -> bool:
    body = case.body
    if not isinstance(body, dict):
        return False
    mode = str((case.headers or {}).get("x-vnext-payload-mode", ""))
    lowered = {str(name).lower() for name in body}
    if mode == "raw":
        return True
    return mode != "standard" and "attributes" not in lowered and not lowered <= ENVELOPE_KEYS


def _error_code(response: Any) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return str(body.get("errorCode")) if isinstance(body, dict) else None


def _pointers(response: Any) -> set[str]:
    try:
        body = response.json()
    except ValueError:
        return set()
    errors = body.get("errors") if isinstance(body, dict) else None
    return {str(e.get("pointer")) for e in errors or [] if isinstance(e, dict)}


def _unstorable(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_unstorable(item) for item in value)
    return False


FUZZ_WORKFLOW = "instance-management-test-workflow"


def real_paths(instance: str) -> dict[str, str]:
    """Path parameters naming things that exist (an example workflow, one of its instances), so
    requests get past the 404s."""
    return {
        "domain": "core",
        "workflow": FUZZ_WORKFLOW,
        "instance": instance,
        "transition": "complete",
        "kind": "workflow",
        "key": FUZZ_WORKFLOW,
    }


@dataclass
class FuzzReport:
    """What a run sent and what failed (one line per distinct failure)."""

    operations: list[str] = field(default_factory=list)
    cases: int = 0
    server_errors: int = 0
    failures: list[str] = field(default_factory=list)
    # The first request and answer of each failure, to reproduce it.
    examples: list[str] = field(default_factory=list)


def _run(
    report: FuzzReport,
    operation: Any,
    mode: GenerationMode,
    paths: dict[str, str],
    headers: dict[str, str],
    max_examples: int,
    seed_free: bool,
) -> None:
    strategy = operation.as_strategy(mode, path_parameters=paths or None)

    @given(case=strategy)
    @hypothesis_settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=not seed_free,
        database=None,
        report_multiple_bugs=False,
    )
    def check(case: Any) -> None:
        response = case.call(headers=headers)
        report.cases += 1
        if response.status_code >= 500:
            report.server_errors += 1
        try:
            case.validate_response(
                response, headers=headers, excluded_checks=excused(case, response)
            )
        except (Failure, FailureGroup) as failure:
            found = failure.exceptions if isinstance(failure, FailureGroup) else [failure]
            for one in found:
                detail = " ".join((one.message or "").split())
                line = f"{operation.label} [{mode}] {one.title}: {detail}"
                if line not in report.failures:
                    report.failures.append(line)
                    report.examples.append(
                        f"{line}\n  sent: {case.method} {case.formatted_path} "
                        f"query={case.query!r:.200} body={case.body!r:.300}\n"
                        f"  got: {response.status_code} {response.text[:300]}"
                    )

    check()


def fuzz(
    schema: Any,
    headers: dict[str, str],
    real_paths: dict[str, str],
    *,
    max_examples: int,
    seed_free: bool = False,
    progress: Callable[[str], None] | None = None,
) -> FuzzReport:
    """Run every operation of `schema` in both generation modes, with random paths and with
    `real_paths`; `max_examples` per (operation, mode, paths). Failures are collected, not
    raised."""
    report = FuzzReport()
    for result in schema.get_all_operations():
        operation = result.ok()
        names = {p.name for p in operation.path_parameters}
        fixed = {k: v for k, v in real_paths.items() if k in names}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for paths in ({}, fixed) if fixed else ({},):
                try:
                    _run(report, operation, mode, paths, headers, max_examples, seed_free)
                except Unsatisfiable:
                    # Nothing of this operation can be made invalid with the paths fixed.
                    if mode != GenerationMode.NEGATIVE:
                        raise
        report.operations.append(operation.label)
        if progress is not None:
            progress(f"{operation.label}: {report.cases} cases so far")
    return report
