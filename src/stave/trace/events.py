"""The fields of a Kineto / Chrome trace event that the analysis reads, as typed msgspec structs.

Decoding straight into these structs is what makes the reader fast: msgspec's C decoder skips every
field not declared here (call stacks, input shapes, concrete inputs) without building Python
objects for them. Traces are written by many PyTorch versions and by hand-made tools, so a field
with an unexpected type does not fail the file: :func:`event_from_dict` rebuilds the event leniently,
dropping only the fields it cannot use.
"""

from __future__ import annotations

from typing import Any

import msgspec


class EventArgs(msgspec.Struct, gc=False):
    """The ``args`` keys stave uses (absent keys are ``None``)."""

    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    nbytes: int | None = msgspec.field(default=None, name="bytes")
    stream: int | str | None = None
    device: int | None = None
    size: int | str | None = None
    name: str | None = None
    labels: str | None = None
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    # An op's operand dtypes (written with record_shapes=True), left undecoded: only dtype names are
    # looked for, and decoding a list per op would slow the reader by a third on such traces. A Raw
    # points into the reader's buffer, so events must be dropped before the reader reads on.
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")


class Event(msgspec.Struct, gc=False):
    """One trace event. ``ts``/``dur`` are microseconds as written: an int, or the text of a
    fractional literal; where the C time reader is built, a fractional literal is instead its
    time in whole nanoseconds held by a float (exact; see :mod:`stave.trace.times`)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    # Untyped so that the decoder's float_hook sees fractional times and keeps their text.
    ts: Any = None
    dur: Any = None
    args: EventArgs | None = None


# float_hook applies to the untyped fields only (ts, dur): their literals stay text, parsed exactly.
# The hook only has to return the text it is given; ``str.strip`` does (a float literal has no
# whitespace) through a cheaper call than ``str`` (a type call), which is measurable per event.
_KEEP_TEXT = str.strip
EVENT_LIST_DECODER = msgspec.json.Decoder(list[Event], float_hook=_KEEP_TEXT)
# The same for a piece re-read leniently (any value of any field).
LENIENT_DECODER = msgspec.json.Decoder(float_hook=_KEEP_TEXT)

_EVENT_FIELDS: dict[str, tuple[type, ...]] = {
    "ph": (str,),
    "cat": (str,),
    "name": (str,),
    "pid": (int, str),
    "tid": (int, str),
    "ts": (int, str),
    "dur": (int, str),
}
_ARG_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "correlation": ("correlation", (int,)),
    "External id": ("external_id", (int,)),
    "bytes": ("nbytes", (int,)),
    "stream": ("stream", (int, str)),
    "device": ("device", (int,)),
    "size": ("size", (int, str)),
    "name": ("name", (str,)),
    "labels": ("labels", (str,)),
    "Total Allocated": ("total_allocated", (int,)),
    "Device Type": ("device_type", (int,)),
    "Device Id": ("device_id", (int,)),
    "Input type": ("input_types", (list,)),
}


def _ok(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int subclass in Python but never a valid id or time in a trace.
    return isinstance(value, types) and not isinstance(value, bool)


def event_from_dict(obj: Any) -> Event | None:
    """Build an :class:`Event` from a decoded JSON object, keeping only well-typed fields.

    Returns ``None`` when ``obj`` is not an object at all (the caller counts it as skipped).
    """
    if not isinstance(obj, dict):
        return None
    fields = {key: obj[key] for key, types in _EVENT_FIELDS.items() if key in obj and _ok(obj[key], types)}
    for key in ("ts", "dur"):
        value = obj.get(key)
        if isinstance(value, float):
            # A caller that parsed floats itself: its shortest repr is the literal it read.
            fields[key] = repr(value)
    raw_args = obj.get("args")
    if isinstance(raw_args, dict):
        args = {
            attr: raw_args[key]
            for key, (attr, types) in _ARG_FIELDS.items()
            if key in raw_args and _ok(raw_args[key], types)
        }
        fields["args"] = EventArgs(**args)
    return Event(**fields)
