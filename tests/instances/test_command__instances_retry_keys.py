"""`manage.py instances_retry --id` takes a business key as well as a UUID, resolved as the API
resolves `{instance}` (the live instance first); an unknown or ambiguous key is a one-line error
with an exit code, never a traceback, from the real command line too."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from instances.management.commands._instance_refs import AMBIGUOUS
from instances.management.commands.instances_retry import Command
from instances.models import Instance
from tests.instances.operator_fixtures import faulted_instance, publish_workflows

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _workflows() -> None:
    publish_workflows()


def keyed(key: str, workflow: str = "fixable", status: str = "F") -> Instance:
    instance = faulted_instance(workflow)
    Instance.objects.filter(pk=instance.pk).update(key=key, status=status)
    return Instance.objects.get(pk=instance.pk)


def run_from_argv(monkeypatch, *argv: str) -> int:
    """The command as `manage.py` runs it (its parser, its error handling): the exit code."""
    # `run_from_argv` closes every connection when it ends: the test's transaction must live.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    with pytest.raises(SystemExit) as exited:
        Command().run_from_argv(["manage.py", "instances_retry", *argv])
    return int(exited.value.code or 0)


def test_a_business_key_selects_its_live_instance(capsys):
    keyed("order-7", status="C")  # a completed namesake: the live one is meant
    live = keyed("order-7")

    call_command("instances_retry", "--id", "order-7", "--dry-run")

    out = capsys.readouterr().out
    assert f"would retry {live.pk} (fixable, state ready)" in out
    assert "1 instance(s) selected" in out


def test_a_key_of_several_workflows_needs_the_workflow(capsys):
    first = keyed("shared")
    keyed("shared", workflow="uncancellable")

    with pytest.raises(CommandError, match="several workflows") as refused:
        call_command("instances_retry", "--id", "shared", "--dry-run")
    assert refused.value.returncode == AMBIGUOUS
    assert "core/fixable, core/uncancellable" in str(refused.value)

    call_command("instances_retry", "--id", "shared", "--workflow", "fixable", "--dry-run")
    assert f"would retry {first.pk}" in capsys.readouterr().out
    call_command(
        "instances_retry",
        "--id",
        "shared",
        "--domain",
        "core",
        "--workflow",
        "fixable",
        "--dry-run",
    )
    assert f"would retry {first.pk}" in capsys.readouterr().out


def test_unknown_and_ambiguous_keys_exit_with_a_message_not_a_traceback(monkeypatch, capsys):
    keyed("shared")
    keyed("shared", workflow="uncancellable")

    assert run_from_argv(monkeypatch, "--id", "no-such-key", "--no-progress") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "CommandError: no instance with id or business key 'no-such-key'" in err

    assert run_from_argv(monkeypatch, "--id", "shared", "--dry-run") == AMBIGUOUS
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "add --workflow (and --domain)" in err

    assert run_from_argv(monkeypatch, "--id", "shared", "--domain", "elsewhere") == 1
    assert "'shared' in elsewhere" in capsys.readouterr().err
