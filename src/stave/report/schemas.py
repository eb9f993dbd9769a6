"""The versioned JSON schemas of stave's reports, and validation against them.

Schema files live beside this module in ``schemas/`` (package data), named after the schema tag:
``stave.doctor/1`` is ``schemas/stave.doctor-1.schema.json``. Validation uses ``jsonschema``
when it is installed (a dev dependency); without it, only the tag and the required top-level
keys are checked, and the log says so once.
"""

from __future__ import annotations

import functools
import json
import logging
from importlib import resources
from typing import Any

from stave.errors import FormatError

log = logging.getLogger(__name__)

# How many validation problems one error message lists; more would bury the first one.
MAX_ERRORS_SHOWN = 5


def schema_filename(tag: str) -> str:
    """File name of the schema for ``tag`` ("stave.doctor/1" -> "stave.doctor-1.schema.json")."""
    return tag.replace("/", "-") + ".schema.json"


@functools.lru_cache(maxsize=None)
def load_schema(tag: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for a report tag such as ``"stave.doctor/1"``."""
    path = resources.files("stave.report").joinpath("schemas", schema_filename(tag))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FormatError(f"no schema file for {tag!r} ({schema_filename(tag)}) in stave.report") from exc


def schema_errors(obj: Any, tag: str) -> list[str]:
    """Every way ``obj`` breaks the schema ``tag``, as "path: message" lines (empty when valid)."""
    schema = load_schema(tag)
    try:
        import jsonschema
    except ImportError:
        _warn_no_jsonschema()
        return _minimal_errors(obj, tag, schema)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{_json_path(e.absolute_path)}: {e.message}" for e in errors]


def validate_report(obj: Any, tag: str) -> None:
    """Raise :class:`FormatError` naming the first problems when ``obj`` breaks schema ``tag``."""
    errors = schema_errors(obj, tag)
    if errors:
        shown = "; ".join(errors[:MAX_ERRORS_SHOWN])
        more = len(errors) - MAX_ERRORS_SHOWN
        raise FormatError(f"not a valid {tag} report: {shown}" + (f" (+{more} more)" if more > 0 else ""))


def _json_path(parts: Any) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _minimal_errors(obj: Any, tag: str, schema: dict[str, Any]) -> list[str]:
    if not isinstance(obj, dict):
        return [f"$: expected an object, got {type(obj).__name__}"]
    errors = []
    if obj.get("schema") != tag:
        errors.append(f"$.schema: expected {tag!r}, got {obj.get('schema')!r}")
    errors.extend(f"$: missing required key {key!r}" for key in schema.get("required", []) if key not in obj)
    return errors


@functools.lru_cache(maxsize=1)
def _warn_no_jsonschema() -> None:
    log.info("jsonschema is not installed; checking only the schema tag and the top-level keys")
