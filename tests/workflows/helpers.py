"""Test helpers for definitions: supply Python for the corpus's emptied scripts."""

from __future__ import annotations

from typing import Any

from workflows.documents import detect_kind
from workflows.validation.scripts import iter_script_sites

# Defines every handler name a site may call, so any script position accepts it.
UNIVERSAL_SCRIPT = """
def handler(context):
    return True

def input_handler(task, context):
    return ScriptResponse()

def output_handler(context):
    return {}

def item_input_handler(task, context, item):
    return ScriptResponse()
"""


def with_scripts(document: dict[str, Any], source: str = UNIVERSAL_SCRIPT) -> dict[str, Any]:
    """Fill every empty script `code` of `document` (in place) with `source`, as NAT text."""
    kind = detect_kind(document)
    assert kind is not None
    for site in iter_script_sites(document, kind):
        if not site.node.get("code"):
            site.node["code"] = source
            site.node["encoding"] = "NAT"
    return document
