"""Dataclass <-> plain dict conversion for measurement records (JSON-safe, no pickle).

Records cross process and machine boundaries (per-rank files of a distributed run), so reading
one back checks each field's type against the dataclass and raises ``FormatError`` on a mismatch
instead of trusting the file.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from typing import Any, TypeVar

from stave.errors import FormatError

T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """Convert dataclasses (recursively) to dicts; non-finite floats become ``None``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def from_dict(cls: type[T], data: Any, where: str = "record") -> T:
    """Build ``cls`` from ``data`` produced by :func:`to_dict`, checking types on the way.

    Unknown keys are ignored (a newer writer may add fields); missing keys take the field default.
    """
    return _convert(cls, data, where)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except FormatError as exc:
                errors.append(str(exc))
        raise FormatError(errors[0] if errors else f"{where}: unexpected null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise FormatError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise FormatError(f"{where}: {exc}") from exc
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise FormatError(f"{where}: expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp) or (Any,)
        items = [_convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise FormatError(f"{where}: expected an object, got {type(value).__name__}")
        _key_tp, val_tp = typing.get_args(tp) or (str, Any)
        return {str(k): _convert(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FormatError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FormatError(f"{where}: expected an integer, got {type(value).__name__}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise FormatError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
        return value
    if origin is None and tp is list:
        if not isinstance(value, list):
            raise FormatError(f"{where}: expected a list")
        return value
    return value


def json_safe(obj: Any, digits: int | None = None) -> Any:
    """Plain JSON types only: non-finite floats become ``None``, numpy/torch scalars and arrays
    Python numbers and lists, tuples and sets lists, keys strings; anything else its ``str``.

    The one JSON sanitizer of stave (reports, trace JSON, the ladder's JSON, finding evidence).
    ``digits``: floats rounded to that many significant digits (evidence), else kept exact.
    """
    kind = type(obj)
    # Exact-type fast paths first: a long run's report holds hundreds of thousands of numbers.
    if kind is float:
        if not math.isfinite(obj):
            return None
        return obj if digits is None else float(f"{obj:.{digits}g}")
    if obj is None or kind is int or kind is str or kind is bool:
        return obj
    if isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, digits) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [json_safe(v, digits) for v in sorted(obj, key=str)]
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return json_safe(float(obj), digits)
    if getattr(obj, "shape", None) == () and hasattr(obj, "item"):
        # A numpy scalar or 0-d tensor that slipped into evidence: its Python value.
        return json_safe(obj.item(), digits)
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist(), digits)
    return str(obj)
