"""Reading component files from disk: a file or a folder tree like vnext-example's
`core/Workflows/...`. Each script's `location` is read relative to its JSON file and embedded;
`{"ref": "path.json"}` references are replaced by the referenced component's identity."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workflows.documents import detect_kind
from workflows.services import BatchItem
from workflows.validation.scripts import iter_script_sites

IGNORED_DIRS = frozenset({"node_modules", ".git", ".venv", "__pycache__"})
IGNORED_FILES = frozenset({"package.json", "package-lock.json", "tsconfig.json"})


class OutsideImportedTree(ValueError):
    """A `location` or `ref` names a file outside the folder being imported."""


def discover_files(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Path]]:
    """Every `.json` file named or found under the given paths, in a stable order, each with
    the folder it was imported from (files it names must lie inside that folder)."""
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            yield path, path.parent
        elif path.is_dir():
            for candidate in sorted(path.rglob("*.json")):
                relative = candidate.relative_to(path).parts
                hidden = any(part.startswith(".") or part in IGNORED_DIRS for part in relative)
                if not hidden and candidate.name not in IGNORED_FILES:
                    yield candidate, path
        else:
            raise FileNotFoundError(f"{path} does not exist")


def load_file(path: Path, root: Path | None = None) -> BatchItem:
    """Read one file into a batch item: parsed, scripts embedded, file references resolved.
    Script files and references must lie inside `root` (default: the file's folder): a
    definition never pulls a file from elsewhere on the importing machine."""
    source = str(path)
    inside = (root or path.parent).resolve()
    if not path.resolve().is_relative_to(inside):
        # A symbolic link inside the folder to a definition elsewhere is refused like a script
        # `location` outside it: the folder is all an import reads.
        return BatchItem(
            document=None,
            source=source,
            status="rejected",
            message=f"{path} links to {path.resolve()}, outside the imported folder {inside}",
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return BatchItem(document=None, source=source, status="rejected", message=str(exc))
    kind = detect_kind(document)
    if kind is None:
        return BatchItem(
            document=document, source=source, status="skipped", message="not a vNext component"
        )
    try:
        for site in iter_script_sites(document, kind):
            embed_script(site.node, path.parent, inside)
        _resolve_file_references(document, path.parent, inside)
    except OutsideImportedTree as exc:
        return BatchItem(document=document, source=source, status="rejected", message=str(exc))
    return BatchItem(document=document, source=source)


def script_file_for(location: str, base_dir: Path, root: Path | None = None) -> Path | None:
    """The Python file a script `location` names: `./src/X.py`, or for a vNext `./src/X.csx`
    its re-authored Python twin `./src/X.py`. None when neither exists;
    `OutsideImportedTree` when it lies outside `root`."""
    candidate = (base_dir / location).resolve()
    python_twin = candidate.with_suffix(".py")
    if root is not None and not python_twin.is_relative_to(root.resolve()):
        raise OutsideImportedTree(
            f"script location {location!r} is outside the imported folder {root}"
        )
    if python_twin.is_file():
        return python_twin
    return None


def embed_script(node: dict[str, Any], base_dir: Path, root: Path | None = None) -> None:
    """Embed the script file a script object's `location` names, as plain text (`NAT`), whether
    or not the object has a `code` key."""
    location = node.get("location")
    if not isinstance(location, str) or not location or node.get("encoding") == "REF":
        return
    script_file = script_file_for(location, base_dir, root)
    if script_file is None:
        return  # an embedded `code` stays; a missing or empty one is refused, "script missing"
    node["code"] = script_file.read_text(encoding="utf-8")
    node["encoding"] = "NAT"
    if location.endswith(".csx"):
        node["location"] = location[: -len(".csx")] + ".py"


def _resolve_file_references(node: Any, base_dir: Path, root: Path) -> None:
    if isinstance(node, dict):
        for key, value in list(node.items()):
            if isinstance(value, dict) and set(value) == {"ref"} and isinstance(value["ref"], str):
                target = _read_reference(value["ref"], base_dir, root)
                if target is not None:
                    node[key] = target
            else:
                _resolve_file_references(value, base_dir, root)
    elif isinstance(node, list):
        for value in node:
            _resolve_file_references(value, base_dir, root)


def _read_reference(ref: str, base_dir: Path, root: Path) -> dict[str, str] | None:
    # Looked up from the file's folder upwards, up to the imported folder and never beyond.
    folders = [base_dir.resolve(), *base_dir.resolve().parents]
    for folder in (f for f in folders if f.is_relative_to(root)):
        candidate = (folder / ref).resolve()
        if not candidate.is_relative_to(root):
            raise OutsideImportedTree(f"reference {ref!r} is outside the imported folder {root}")
        if candidate.is_file():
            try:
                target = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                return None
            if isinstance(target, dict):
                return {
                    name: str(target.get(name, "")) for name in ("key", "domain", "flow", "version")
                }
    return None
