"""The OpenAPI document against the running API: schemathesis generates requests for every
operation of `/api/schema/` (valid and invalid ones, with random paths and with paths naming real
things) and runs every check on each answer (`bench/fuzz_api.py`). A bounded run here;
`python -m bench fuzz` sends at least 5,000 cases.

The requests reach Django through WSGI in-process as a superuser's token, against the example
workflows and one instance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from rest_framework.authtoken.models import Token

from bench.fuzz_api import FUZZ_WORKFLOW, fuzz, real_paths
from instances.services import RequestInfo, instance_start
from tests.instances.scenario_api import import_examples

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 3
WORKFLOW = FUZZ_WORKFLOW
# 29, and suspend, resume, migrate, batch create, get and cancel; the human-task inbox, one
# task, its claim, release and complete
OPERATIONS = 40


@pytest.fixture
def api_schema(db: None, operator: Any, settings: Any) -> Iterator[Any]:
    # The check of wrong credentials sends hundreds: the login lockout (its own test) would
    # answer them 429 instead of 401.
    settings.AXES_ENABLED = False
    import_examples()
    # In-process requests share the test's database connection: Django must not close it at
    # the end of each request (its test client does the same).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_every_operation_conforms_to_the_document(api_schema: Any, operator: Any) -> None:
    token = Token.objects.get_or_create(user=operator)[0].key
    # Not through the test client: it reconnects the signals the fixture disconnected.
    started = instance_start(domain="core", workflow=WORKFLOW, body={}, info=RequestInfo())
    paths = real_paths(str(started.instance.id))

    report = fuzz(api_schema, {"Authorization": f"Token {token}"}, paths, max_examples=MAX_EXAMPLES)

    assert report.failures == [], "\n".join(report.examples)
    assert report.server_errors == 0
    assert len(report.operations) == OPERATIONS, report.operations
    assert report.cases >= OPERATIONS * 2 * MAX_EXAMPLES
