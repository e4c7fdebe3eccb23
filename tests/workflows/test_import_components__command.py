"""`import_components` / `validate_components`: files and folder trees, script files embedded,
dependency order, a summary, exit code 1 on rejection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.conftest import CORPUS_DIR, EXAMPLES_DIR
from workflows.models import Component

pytestmark = pytest.mark.django_db
EXAMPLE_FILES = len(list(EXAMPLES_DIR.rglob("*.json")))
EXAMPLE_WORKFLOWS = len(list((EXAMPLES_DIR / "core" / "Workflows").rglob("*.json")))


def run(command: str, *args: str, capsys) -> tuple[int, str, str]:
    try:
        call_command(command, *args, "--no-progress")
        code = 0
    except CommandError as exc:
        code = exc.returncode
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_import_examples_embeds_python_scripts(capsys):
    code, out, _ = run("import_components", str(EXAMPLES_DIR), capsys=capsys)
    assert code == 0
    assert f"{EXAMPLE_FILES} published" in out
    workflow = Component.objects.get(key="instance-management-test-workflow")
    mapping = workflow.document["attributes"]["startTransition"]["onExecutionTasks"][0]["mapping"]
    assert mapping["encoding"] == "NAT"
    assert mapping["location"] == "./src/InitInstanceMgmtMapping.py"
    assert "def output_handler(context):" in mapping["code"]


def test_importing_twice_reports_unchanged(capsys):
    run("import_components", str(EXAMPLES_DIR), capsys=capsys)
    code, out, _ = run("import_components", str(EXAMPLES_DIR), capsys=capsys)
    assert code == 0
    assert f"{EXAMPLE_FILES} unchanged" in out
    assert Component.objects.count() == EXAMPLE_FILES


def test_dependency_order_does_not_depend_on_the_paths_given(capsys):
    workflows = EXAMPLES_DIR / "core" / "Workflows"
    others = [EXAMPLES_DIR / "core" / name for name in ("Schemas", "Tasks", "Views", "Functions")]
    code, out, _ = run("import_components", str(workflows), *map(str, others), capsys=capsys)
    assert code == 0, out
    assert Component.objects.filter(kind="workflow").count() == EXAMPLE_WORKFLOWS


def test_the_corpus_imports_except_what_lacks_scripts(capsys):
    code, out, err = run("import_components", str(CORPUS_DIR), capsys=capsys)
    assert code == 1
    assert "script missing (./src/AutoGateRule.csx has no code)" in err
    assert "/attributes/states/0/transitions/0/rule/code" in err
    # Script-free components (schemas, tasks, views, payload-modes ...) are published, the
    # fan-out tasks (type 21) after the inner task they clone.
    assert Component.objects.filter(key="payload-modes", kind="workflow").exists()
    assert Component.objects.filter(kind="task").count() == 42
    assert "task type 21" not in err
    # A workflow whose subflow was rejected is rejected too, and says why.
    assert not Component.objects.filter(key="chain-busy-root").exists()
    assert "referenced workflow:core/chain-busy-middle@1.3.0 does not exist" in err
    assert "rejected" in out


def test_validate_components_stores_nothing(capsys):
    code, out, _ = run("validate_components", str(EXAMPLES_DIR), capsys=capsys)
    assert code == 0
    assert f"{EXAMPLE_FILES} valid" in out
    assert Component.objects.count() == 0


def test_csx_location_uses_its_python_twin(tmp_path: Path, capsys):
    shutil.copytree(CORPUS_DIR / "core" / "Tasks" / "schedule-after-auto", tmp_path / "Tasks")
    flow_dir = tmp_path / "Workflows"
    flow_dir.mkdir()
    shutil.copy(
        CORPUS_DIR / "core" / "Workflows" / "schedule-after-auto" / "schedule-after-auto.json",
        flow_dir,
    )
    code, _, err = run("validate_components", str(tmp_path), capsys=capsys)
    assert code == 1
    assert err.count("script missing") == 5

    (flow_dir / "src").mkdir()
    rule = "def handler(context):\n    return context.instance.data.get('mode') == 'auto'\n"
    mapping = "def input_handler(task, context):\n    return None\n"
    timer = (
        "from datetime import timedelta\n\ndef handler(context):\n    return timedelta(seconds=8)\n"
    )
    for name, source in {
        "SeedMapping": mapping,
        "AutoGateRule": rule,
        "AutoAdvanceMapping": mapping,
        "GateTimeoutTimer": timer,
        "TimeoutMapping": mapping,
    }.items():
        (flow_dir / "src" / f"{name}.py").write_text(source)
    code, out, err = run("validate_components", str(tmp_path), capsys=capsys)
    assert (code, err) == (0, "")
    assert "2 valid" in out


def test_a_broken_script_file_is_rejected_with_its_pointer_and_line(tmp_path: Path, capsys):
    document = json.loads(
        (EXAMPLES_DIR / "core/Tasks/instance-management/instance-mgmt-script-task.json").read_text()
    )
    (tmp_path / "task.json").write_text(json.dumps(document))
    workflow_dir = EXAMPLES_DIR / "core" / "Workflows" / "instance-management"
    shutil.copy(workflow_dir / "instance-management-test-workflow.json", tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "InitInstanceMgmtMapping.py").write_text(
        "import subprocess\n\ndef output_handler(context):\n    return {}\n"
    )
    code, _, err = run("import_components", str(tmp_path), capsys=capsys)
    assert code == 1
    assert (
        "/attributes/startTransition/onExecutionTasks/0/mapping/code: line 1: "
        "module 'subprocess' is not one scripts may import"
    ) in err
    assert not Component.objects.filter(kind="workflow").exists()


def test_invalid_json_and_missing_paths(tmp_path: Path, capsys):
    (tmp_path / "broken.json").write_text("{oops")
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / "notes.json").write_text('{"hello": "world"}')
    code, out, err = run("import_components", str(tmp_path), capsys=capsys)
    assert code == 1
    assert "broken.json" in err
    assert "1 rejected" in out
    assert "1 skipped" in out
    with pytest.raises(CommandError, match="does not exist"):
        call_command("import_components", str(tmp_path / "nope"), "--no-progress")


def test_a_value_the_runtime_would_not_execute_is_rejected_with_its_pointer(tmp_path: Path, capsys):
    example = EXAMPLES_DIR / "core"
    shutil.copy(example / "Tasks/instance-management/instance-mgmt-script-task.json", tmp_path)
    shutil.copytree(example / "Workflows/instance-management", tmp_path / "flow")
    path = tmp_path / "flow" / "instance-management-test-workflow.json"
    document = json.loads(path.read_text())
    document["attributes"]["timeout"]["timer"]["reset"] = "always"
    path.write_text(json.dumps(document))

    code, out, err = run("validate_components", str(tmp_path), capsys=capsys)
    assert code == 1
    assert "/attributes/timeout/timer/reset: unknown timer reset 'always': use None" in err
    assert "1 rejected" in out
    assert "1 valid" in out
