"""`import_components` reads script files and `{"ref": ...}` references only inside the folder
being imported: a definition naming `../../../etc/passwd` (or any file outside) is rejected with
why, and nothing of that file is read into the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from workflows.models import Component

pytestmark = pytest.mark.django_db


def workflow_with_script(location: str) -> dict:
    return {
        "key": "leaky-flow",
        "domain": "core",
        "version": "1.0.0",
        "flow": "sys-flows",
        "flowVersion": "1.0.0",
        "tags": ["test"],
        "attributes": {
            "type": "F",
            "labels": [{"label": "x", "language": "en"}],
            "startTransition": {
                "key": "start",
                "target": "a",
                "triggerType": 0,
                "versionStrategy": "None",
                "labels": [{"label": "x", "language": "en"}],
            },
            "states": [
                {
                    "key": "a",
                    "stateType": 1,
                    "versionStrategy": "None",
                    "labels": [{"label": "x", "language": "en"}],
                    "transitions": [
                        {
                            "key": "go",
                            "target": "a",
                            "triggerType": 1,
                            "versionStrategy": "None",
                            "labels": [{"label": "x", "language": "en"}],
                            "rule": {"location": location, "code": ""},
                        }
                    ],
                }
            ],
        },
    }


@pytest.mark.parametrize("location", ["../outside/Rule.py", "/tmp/elsewhere/Rule.py"])
def test_a_script_location_outside_the_imported_folder_is_rejected(tmp_path: Path, location):
    secret = tmp_path / "outside" / "Rule.py"
    secret.parent.mkdir()
    secret.write_text("SECRET = 'do-not-read'\ndef handler(context):\n    return True\n")
    if location.startswith("/tmp/"):
        location = str(secret)
    imported = tmp_path / "imported"
    imported.mkdir()
    (imported / "flow.json").write_text(json.dumps(workflow_with_script(location)))
    with pytest.raises(CommandError):
        call_command("import_components", str(imported), "--no-progress")
    assert not Component.objects.filter(key="leaky-flow").exists()
    assert not any("do-not-read" in json.dumps(c.document) for c in Component.objects.all())


def test_a_script_inside_the_imported_folder_is_embedded(tmp_path: Path):
    imported = tmp_path / "imported"
    (imported / "src").mkdir(parents=True)
    (imported / "src" / "Rule.py").write_text("def handler(context):\n    return True\n")
    (imported / "flow.json").write_text(json.dumps(workflow_with_script("./src/Rule.py")))
    call_command("import_components", str(imported), "--no-progress")
    stored = Component.objects.get(key="leaky-flow").document
    rule = stored["attributes"]["states"][0]["transitions"][0]["rule"]
    assert "return True" in rule["code"]


def test_a_json_file_symlinked_from_outside_the_imported_folder_is_refused(tmp_path: Path, capsys):
    # The link sits inside the folder, the definition it points at does not: following it would
    # publish (and embed the scripts of) a file from anywhere on the importing machine.
    outside = tmp_path / "outside"
    outside.mkdir()
    document = workflow_with_script("./src/Rule.py")
    document["attributes"]["states"][0]["transitions"][0]["rule"].update(
        code="SECRET = 'do-not-read'\ndef handler(context):\n    return True\n", encoding="NAT"
    )
    (outside / "flow.json").write_text(json.dumps(document))
    imported = tmp_path / "imported"
    imported.mkdir()
    (imported / "flow.json").symlink_to(outside / "flow.json")

    with pytest.raises(CommandError) as refused:
        call_command("import_components", str(imported), "--no-progress")

    assert refused.value.returncode == 1
    assert "outside the imported folder" in capsys.readouterr().err
    assert not Component.objects.filter(key="leaky-flow").exists()


def test_a_symlink_to_a_json_file_inside_the_imported_folder_is_followed(tmp_path: Path):
    imported = tmp_path / "imported"
    (imported / "real").mkdir(parents=True)
    (imported / "real" / "flow.json").write_text(json.dumps(workflow_with_script("./real/Rule.py")))
    (imported / "real" / "Rule.py").write_text("def handler(context):\n    return True\n")
    (imported / "alias.json").symlink_to(imported / "real" / "flow.json")

    call_command("import_components", str(imported / "alias.json"), "--no-progress")

    assert Component.objects.filter(key="leaky-flow").exists()
