"""`python -m bench fuzz`: the API against its OpenAPI document, at least 5,000 schemathesis
cases (see `bench/fuzz_api.py`), on the benchmarks' database with the example workflows. The
figures: server errors and failed checks (targets: 0), and the cases sent."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.wsgi import get_wsgi_application
from rest_framework.authtoken.models import Token

from bench.fuzz_api import FUZZ_WORKFLOW, fuzz, real_paths
from bench.summary import record
from instances.services import RequestInfo, instance_start

WORKFLOW = FUZZ_WORKFLOW
MIN_CASES = 5000
# 19 operations x 2 modes x (random, real) paths = about 76 runs.
EXAMPLES_PER_RUN = 80


def main() -> None:
    """Fuzz until at least MIN_CASES cases were sent; print and record the figures."""
    import schemathesis

    from tests.conftest import EXAMPLES_DIR

    # Thousands of refused requests are the point: keep the log for real errors.
    for name in ("django.request", "axes"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # Wrong Basic credentials cost a password hash each (PBKDF2, a third of a second, by
    # design): the fuzzer sends thousands, so it hashes with a cheap hasher.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AXES_ENABLED = False  # the wrong-credentials check would trip the login lockout
    call_command("migrate", interactive=False, verbosity=0)
    call_command("import_components", str(EXAMPLES_DIR), "--no-progress", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(
        username="bench-fuzzer", defaults={"is_superuser": True, "is_staff": True}
    )
    token = Token.objects.get_or_create(user=user)[0].key
    instance = instance_start(domain="core", workflow=WORKFLOW, body={}, info=RequestInfo())
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    started = time.monotonic()
    cases, server_errors, failures = 0, 0, []
    while cases < MIN_CASES:
        report = fuzz(
            schema,
            {"Authorization": f"Token {token}"},
            real_paths(str(instance.instance.id)),
            max_examples=EXAMPLES_PER_RUN,
            seed_free=cases > 0,
            progress=print,
        )
        cases += report.cases
        server_errors += report.server_errors
        failures += [line for line in report.failures if line not in failures]
    seconds = time.monotonic() - started
    print(f"{cases} cases over {len(report.operations)} operations in {seconds:.0f} s")
    for line in failures:
        print("  FAILED", line)
    record(
        "fuzz: cases sent (schemathesis, all checks)",
        cases,
        "cases",
        target=">= 5000",
        met=cases >= MIN_CASES,
    )
    record("fuzz: server errors", server_errors, "", target="0", met=server_errors == 0)
    record("fuzz: failed checks (distinct)", len(failures), "", target="0", met=not failures)
