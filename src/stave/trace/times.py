"""Trace times as exact integer nanoseconds, straight from the JSON text.

Kineto writes timestamps and durations in microseconds: as integers (older PyTorch) or with a
fractional part of up to three digits (newer PyTorch: ``1695835535123456.789``). A float64 holds
about 16 significant digits, so a 19-digit time parsed as a float lands on a 0.25 µs grid. The
reader therefore never parses a fractional time as a float: the msgspec decoder hands the literal's
text to the tables (``float_hook=str``, see :mod:`stave.trace.events`), and :func:`us_to_ns_exact`
turns a piece's worth of times (Python ints and decimal texts) into int64 nanoseconds. The common
spelling (digits, one optional dot) is parsed in C for the whole piece at once: the texts are
joined, each dot becomes ``,1`` (``12.083`` -> ``12,1083``: integer part, then the fraction behind
a guard digit that keeps its leading zeros) and numpy reads the integers; positions of the dots
and commas, checked first, say which integer is which. Other spellings (signs, exponents) take a
vectorised per-character path, and anything stranger an exact per-value path.

The times of a piece's events are read at once by :func:`event_times_ns`: in C where the optional
extension ``stave._trace_times`` is built (src/stave/_native/trace_times.c; it reads only spellings
it can read exactly and hands anything else back), otherwise by the numpy path above; both give the
same numbers (tests/unit/trace/test_times.py runs both).

Rounding: digits past the nanosecond are rounded half away from zero (``0.0005`` µs -> 1 ns).
A time written as a JSON string holding a number is read as that number (the decoder cannot tell
the two apart); any other value (text, ``true``, a list) is not a time and is reported as invalid.
"""

from __future__ import annotations

import logging
import os
import warnings
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
import numpy as np

log = logging.getLogger(__name__)

try:
    from stave import _trace_times as _native
except ImportError as exc:  # not built here (no C compiler at install time): the numpy path reads them
    log.debug("stave._trace_times unavailable (%s); trace times are parsed by numpy", exc)
    _native = None
# $STAVE_NATIVE=0 turns the native parts off (the same switch as the image decoder's).
NATIVE_ENV = "STAVE_NATIVE"

# Times are microseconds; 2**62 ns is year 2116 from the epoch, and a time beyond it would
# overflow int64 nanoseconds once durations are added.
MAX_TIME_NS = 2**62
MAX_TIME_US = MAX_TIME_NS // 1000
# Integer digits that fit the bound above without overflow in the vectorised path (4.6e15 µs has
# 16); longer texts (leading zeros, absurd values) take the exact per-value path.
_MAX_INT_DIGITS = 16
_DOT, _MINUS, _ZERO, _NINE, _COMMA = ord("."), ord("-"), ord("0"), ord("9"), ord(",")
# Fraction digits the fast path reads (the guard digit plus these stay below 2**63).
_MAX_FRAC_DIGITS = 17
_PLAIN_CHARS = b"0123456789.,"


def us_to_ns_exact(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond times (ints, or decimal texts from the decoder) -> (int64 ns, valid mask).

    Invalid entries (not a number, or ``|t| >= MAX_TIME_US``) are 0 in the first array and False
    in the mask.
    """
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    if type(values[0]) is str:
        fast = _plain_texts(values)
        if fast is not None:
            return fast
    try:
        # The common case of older traces: every time an integer.
        whole = np.array(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        fast = _plain_texts(values)
        return fast if fast is not None else _decimal_texts(values)
    ok = np.abs(whole) < MAX_TIME_US
    return np.where(ok, whole * 1000, 0), ok


def _plain_texts(values: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The fast path for unsigned decimals (module docstring); None when some value is spelled otherwise."""
    try:
        joined = ",".join(values)
    except TypeError:
        # Some integers among the texts: their decimal spelling is exact.
        joined = ",".join([v if type(v) is str else str(v) for v in values])
    try:
        raw = joined.encode("ascii")
    except UnicodeEncodeError:
        return None
    if raw.translate(None, _PLAIN_CHARS):
        return None  # signs, exponents, junk
    n = len(values)
    u = np.frombuffer(raw, dtype=np.uint8)
    commas = np.flatnonzero(u == _COMMA)
    if len(commas) != n - 1:
        return None  # a value holding a comma: not a number
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = commas + 1
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = commas
    ends[-1] = len(raw)
    dots = np.flatnonzero(u == _DOT)
    if len(dots) == n:
        # Every value has a fraction (newer Kineto): as many dots as values, and each inside its own
        # value with digits on both sides, is exactly one dot per value.
        if not ((dots > starts) & (dots < ends - 1)).all():
            return None
        has_dot = np.ones(n, dtype=bool)
        dot = dots
    else:
        field = np.searchsorted(ends, dots)
        if len(dots) and np.any(np.diff(field) == 0):
            return None  # two dots in one value
        has_dot = np.zeros(n, dtype=bool)
        has_dot[field] = True
        dot = ends.copy()
        dot[field] = dots
    int_digits = dot - starts
    frac_digits = np.where(has_dot, ends - dot - 1, 0)
    if (np.any(int_digits < 1) or np.any(int_digits > _MAX_INT_DIGITS) or np.any(has_dot & (frac_digits < 1))
            or np.any(frac_digits > _MAX_FRAC_DIGITS)):
        return None
    with warnings.catch_warnings():
        # numpy warns (deprecated partial read) instead of failing on text it cannot read.
        warnings.simplefilter("error", DeprecationWarning)
        try:
            parts = np.fromstring(raw.replace(b".", b",1"), dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    if len(parts) != n + len(dots):
        return None
    if len(dots) == n:
        whole, guarded, k = parts[0::2], parts[1::2], frac_digits
    else:
        # Index of each value's integer part among the parts: one extra part per dot before it.
        first = np.arange(n) + np.cumsum(has_dot) - has_dot
        whole = parts[first]
        k = frac_digits[has_dot]
        guarded = parts[first[has_dot] + 1]
    frac = guarded - _POW10[k]
    # Up to three digits: whole nanoseconds; more: round half away from zero on the fourth.
    sub_ns = frac * _POW10[np.maximum(3 - k, 0)]
    longer = k > 3
    if longer.any():
        r = frac[longer] // _POW10[k[longer] - 4]
        sub_ns[longer] = r // 10 + (r % 10 >= 5)
    ns = whole * 1000
    ns[has_dot] += sub_ns
    ok = whole < MAX_TIME_US
    return np.where(ok, ns, 0), ok


_POW10 = np.array([10**i for i in range(19)], dtype=np.int64)


def _decimal_texts(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    n = len(values)
    try:
        text = np.array(values, dtype="S")
    except (ValueError, TypeError, UnicodeEncodeError):
        return _per_value(values)
    width = text.dtype.itemsize
    if width == 0:
        return _per_value(values)
    m = text.view(np.uint8).reshape(n, width)
    cols = np.arange(width)
    neg = m[:, 0] == _MINUS
    is_dot = m == _DOT
    length = np.count_nonzero(m, axis=1)
    dot = np.where(is_dot.any(axis=1), is_dot.argmax(axis=1), length)
    after = cols[None, :] > dot[:, None]
    digit = (m >= _ZERO) & (m <= _NINE)
    # Rows the vectorised path cannot take: exponents, signs or junk after the dot, too many
    # integer digits, nothing before the dot.
    odd = (after & (m != 0) & ~digit).any(axis=1) | (dot - neg > _MAX_INT_DIGITS) | (dot - neg < 1)
    if odd.any():
        m = m.copy()
        m[odd] = 0
        m[odd, 0] = _ZERO
        dot = np.where(odd, 1, dot)
        after = cols[None, :] > dot[:, None]
        neg = neg & ~odd
    head = m.copy()
    head[cols[None, :] >= dot[:, None]] = 0
    try:
        whole = head.view(f"S{width}").ravel().astype(np.int64)
    except (ValueError, OverflowError):
        return _per_value(values)
    # The first four digits after the dot: three give whole nanoseconds, the fourth rounds.
    idx = np.minimum(dot[:, None] + np.arange(1, 5)[None, :], width - 1)
    frac = np.take_along_axis(m, idx, axis=1).astype(np.int64) - _ZERO
    inside = (dot[:, None] + np.arange(1, 5)[None, :] < width) & (frac >= 0) & (frac <= 9)
    frac = np.where(inside, frac, 0)
    sub_ns = frac[:, 0] * 100 + frac[:, 1] * 10 + frac[:, 2] + (frac[:, 3] >= 5)
    ns = whole * 1000 + np.where(neg, -sub_ns, sub_ns)
    ok = np.abs(whole) < MAX_TIME_US
    if odd.any():
        for i in np.flatnonzero(odd).tolist():
            ns[i], ok[i] = _one(values[i])
    return np.where(ok, ns, 0), ok


def _per_value(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [_one(v) for v in values]
    return (np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=bool))


def _one(value: Any) -> tuple[int, bool]:
    """One time, exactly (the slow path for unusual spellings)."""
    if isinstance(value, bool) or not isinstance(value, (int, str, bytes)):
        return 0, False
    try:
        d = Decimal(value.decode("ascii") if isinstance(value, bytes) else value)
    except (InvalidOperation, ValueError, UnicodeDecodeError):
        return 0, False
    if not d.is_finite() or abs(d) >= MAX_TIME_US:
        return 0, False
    ns = (d * 1000).to_integral_value(rounding="ROUND_HALF_UP")
    return int(ns), True


def durations_to_ns(values: list[Any]) -> np.ndarray:
    """Microsecond durations to int64 ns: negative or unreadable ones as 0, absurd ones capped."""
    ns, ok = us_to_ns_exact(values)
    return np.where(ok, np.clip(ns, 0, MAX_TIME_NS), 0)


def native_times() -> bool:
    """Whether :func:`event_times_ns` uses the C extension (built, and not turned off by $STAVE_NATIVE=0)."""
    return _native is not None and os.environ.get(NATIVE_ENV, "1") != "0"


def ns_times_decoder() -> msgspec.json.Decoder | None:
    """The reader's event decoder whose hook turns each fractional time literal into whole
    nanoseconds in C (a float, exact below 2**53 ns; other spellings stay text); None without the
    extension. An event then holds no text per time, so the analysis walks events as fast as
    before exact parsing."""
    global _NS_DECODER
    if not native_times():
        return None
    if _NS_DECODER is None:
        from stave.trace.events import Event

        _NS_DECODER = msgspec.json.Decoder(list[Event], float_hook=_native.literal_ns)
    return _NS_DECODER


_NS_DECODER: msgspec.json.Decoder | None = None


def event_times_ns(events: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start ns, start valid, duration ns) of events with a ``ts`` (and maybe a ``dur``).

    Durations follow :func:`durations_to_ns` (absent, negative or unreadable: 0). In C where the
    extension is built and every value is spelled plainly; otherwise through :func:`us_to_ns_exact`.
    """
    if native_times():
        out = _native.event_times(events)
        if out is not None:
            start, ts_ok, dur, dur_ok = out
            dur_ns = np.frombuffer(dur, dtype=np.int64)
            ok = np.frombuffer(dur_ok, dtype=np.bool_)
            return (np.frombuffer(start, dtype=np.int64), np.frombuffer(ts_ok, dtype=np.bool_),
                    np.where(ok, np.clip(dur_ns, 0, MAX_TIME_NS), 0))
    start, ok = us_to_ns_exact([_as_us(e.ts) for e in events])
    return start, ok, durations_to_ns([_as_us(e.dur) or 0 for e in events])


def _as_us(value: Any) -> Any:
    """A time as the text path reads it: a float here is whole nanoseconds from the C hook, which
    becomes its exact microsecond text."""
    if type(value) is float:
        ns = int(value)
        sign, ns = ("-", -ns) if ns < 0 else ("", ns)
        return f"{sign}{ns // 1000}.{ns % 1000:03d}"
    return value
