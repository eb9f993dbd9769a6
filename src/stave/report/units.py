"""Formatting numbers with their units for reports; an absent value (``None``) renders as "n/a".

Every report (terminal, HTML; doctor, trace, bench) formats through these helpers so one
quantity looks the same everywhere. Key-suffix conventions follow docs/schema.md: ``*_s``
seconds, ``*_ns`` nanoseconds, ``*_bytes``, ``*_per_s``, ``*_pct`` (0-100), ``*_share`` /
``*_frac`` (0-1).
"""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"

# Lists in evidence can be long (every worker's pid, every file); a report line shows the first few.
MAX_LIST_ITEMS = 6

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def sig(value: float) -> str:
    """A number with about three significant digits, without exponent notation."""
    magnitude = abs(value)
    if magnitude >= 100 or magnitude == 0:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def fmt_seconds(value_s: float | None) -> str:
    """Seconds in the most readable unit: "48.2 ms", "1.25 s", "350 µs", "12.5 min"."""
    if _absent(value_s):
        return NA
    magnitude = abs(value_s)
    if magnitude == 0:
        return "0 s"
    if magnitude >= 600:
        return f"{sig(value_s / 60)} min"
    if magnitude >= 1:
        return f"{sig(value_s)} s"
    if magnitude >= 1e-3:
        return f"{sig(value_s * 1e3)} ms"
    if magnitude >= 1e-6:
        return f"{sig(value_s * 1e6)} µs"
    return f"{sig(value_s * 1e9)} ns"


def fmt_ms(value_s: float | None) -> str:
    """Seconds shown as milliseconds (a column of step phases reads best in one unit)."""
    if _absent(value_s):
        return NA
    return f"{sig(value_s * 1e3)} ms"


def fmt_us(value_s: float | None) -> str:
    """Seconds shown as microseconds (per-sample costs of loader stages)."""
    if _absent(value_s):
        return NA
    return f"{sig(value_s * 1e6)} µs"


def fmt_bytes(value: float | None) -> str:
    """Bytes with a binary prefix: "512 B", "1.50 GiB"."""
    if _absent(value):
        return NA
    magnitude = abs(float(value))
    unit = 0
    while magnitude >= 1024 and unit < len(_BYTE_UNITS) - 1:
        magnitude /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value)} B"
    return f"{sig(math.copysign(magnitude, value))} {_BYTE_UNITS[unit]}"


def fmt_byte_rate(value: float | None) -> str:
    """Bytes per second: "12.3 MiB/s"."""
    if _absent(value):
        return NA
    return f"{fmt_bytes(value)}/s"


def fmt_rate(value: float | None, unit: str = "/s") -> str:
    """A rate such as samples per second: "1,234/s" or "12.3/s"."""
    if _absent(value):
        return NA
    if abs(value) >= 1000:
        return f"{value:,.0f}{unit}"
    return f"{sig(value)}{unit}"


def fmt_throughput(samples_per_s: float | None, samples_per_step: float | None) -> str:
    """"243 samples/s (32 per step)", or why there is no sample count (no DataLoader batch was seen)."""
    if _absent(samples_per_s) or _absent(samples_per_step):
        return "samples/s not known (no DataLoader batch seen)"
    return f"{fmt_rate(samples_per_s, ' samples/s')} ({fmt_rate(samples_per_step, '')} per step)"


def fmt_pct(value_pct: float | None) -> str:
    """A percentage already on the 0-100 scale (CPU %, GPU utilization): "45%", "3.2%"."""
    if _absent(value_pct):
        return NA
    if abs(value_pct) >= 10:
        return f"{value_pct:.0f}%"
    return f"{value_pct:.1f}%"


def fmt_share(fraction: float | None) -> str:
    """A fraction in [0, 1] as a percentage: 0.452 -> "45.2%"."""
    if _absent(fraction):
        return NA
    return f"{fraction * 100:.1f}%"


def fmt_count(value: float | None) -> str:
    """An integer count with thousands separators, or a non-integer with three digits."""
    if _absent(value):
        return NA
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return sig(float(value))


def fmt_speedup(value: float | None) -> str:
    """An estimated or measured speedup: "1.82x"."""
    if _absent(value):
        return NA
    return f"{value:.2f}x"


def fmt_value(key: str, value: Any) -> str:
    """Format ``value`` by the unit its ``key`` names (``*_s``, ``*_bytes``, ``*_pct``, ...).

    Used for findings' evidence, whose keys follow the schema's unit suffixes; an unknown key
    falls back to a plain number or string.
    """
    if _absent(value):
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        parts = [f"{k}={fmt_value(str(k), v)}" for k, v in list(value.items())[:MAX_LIST_ITEMS]]
        more = len(value) - MAX_LIST_ITEMS
        return ", ".join(parts) + (f", … (+{more})" if more > 0 else "")
    if isinstance(value, (list, tuple)) and key.endswith("shape") and all(isinstance(v, int) for v in value):
        return " × ".join(str(v) for v in value)
    if isinstance(value, (list, tuple)):
        # Items of a list are plain (no thousands separators: "1,024, 2,048" would be ambiguous).
        parts = [str(v) if isinstance(v, int) and not isinstance(v, bool) else fmt_value(key, v)
                 for v in list(value)[:MAX_LIST_ITEMS]]
        more = len(value) - MAX_LIST_ITEMS
        return ", ".join(parts) + (f", … (+{more})" if more > 0 else "")
    if not isinstance(value, (int, float)):
        return str(value)
    return _fmt_number_by_key(key, value)


def _fmt_number_by_key(key: str, value: float) -> str:
    # Longer suffixes first: "_bytes_per_s" must not be read as "_per_s" or "_s".
    if key.endswith("_bytes_per_s"):
        return fmt_byte_rate(value)
    if key.endswith("_per_s"):
        return fmt_rate(value)
    if key.endswith("_bytes") or key == "bytes":
        return fmt_bytes(value)
    if key.endswith("_ns"):
        return fmt_seconds(value / 1e9)
    if key.endswith("_s") or "_s_at_" in key:  # "matmul_s_at_probe_rate": seconds, qualified
        return fmt_seconds(value)
    if key.endswith("_pct"):
        return fmt_pct(value)
    if key.endswith(("_share", "_frac", "_fraction")):
        return fmt_share(value)
    if key.endswith("speedup"):
        return fmt_speedup(value)
    if key.endswith("_ratio"):
        return f"{sig(value)}x"
    if isinstance(value, int):
        return fmt_count(value)
    return sig(value)


_EIGHTHS = " ▏▎▍▌▋▊▉"


def fmt_bar(fraction: float | None, width: int) -> str:
    """A horizontal bar ``width`` characters wide filled to ``fraction`` (in eighths of a cell)."""
    if _absent(fraction) or width <= 0:
        return ""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


# Evidence keys carry their unit as a suffix (docs/schema.md); a reader sees the quantity's name and the
# value with its unit instead. (suffix, noun added to the label or "" when the value's unit says it all);
# longer suffixes first, as in _fmt_number_by_key.
_SUFFIX_NOUNS: tuple[tuple[str, str], ...] = (
    ("_bytes_per_s", "bytes per second"),
    ("_per_s", "per second"),
    ("_bytes", "bytes"),
    ("_ns", "time"),
    ("_s", "time"),
    ("_pct", ""),
    ("_share", "share"),
    ("_frac", "share"),
    ("_fraction", "share"),
    ("_ratio", "ratio"),
)
# Words in evidence keys that read better spelled out or capitalized.
_WORDS = {"h2d": "host→device", "d2h": "device→host", "cpu": "CPU", "gpu": "GPU", "io": "I/O",
          "rss": "RSS", "mfu": "MFU", "psi": "PSI", "num": "number of",
          "tf32": "TF32", "nccl": "NCCL", "cuda": "CUDA"}
# Stems that already say they are a duration: no "time" added after them.
_TIME_WORDS = frozenset({"wait", "time", "idle", "latency", "duration", "stall", "runtime", "exec"})
_KEEP_CASE = frozenset({"bf16", "fp16", "fp32", "fp8"})


def evidence_label(key: str) -> str:
    """A reader's label for an evidence key: ``forward_backward_s`` -> "Forward backward time",
    ``h2d_bytes`` -> "Host→device bytes", ``cpu_main_pct`` -> "CPU main".

    The value beside it is formatted by :func:`fmt_value` with the unit, so the label names only
    the quantity; a key without a known suffix is spelled with spaces.
    """
    stem, noun = key.replace("_s_at_", "_time_at_"), ""  # "matmul_s_at_probe_rate": seconds, qualified
    for suffix, suffix_noun in _SUFFIX_NOUNS:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem, noun = stem[: -len(suffix)], suffix_noun
            break
    raw = stem.split("_")
    if noun == "time" and (_TIME_WORDS & set(raw) or "per" in raw):  # "data wait", "runtime per step"
        noun = ""
    if noun == "bytes per second" and {"bandwidth", "rate", "throughput"} & set(raw):  # "h2d_bandwidth_bytes_per_s"
        noun = ""
    words = [_WORDS.get(w.lower(), w) for w in raw if w]
    if noun and (not words or words[-1] != noun):
        words.append(noun)
    text = " ".join(words) or key
    # A word spelled as written (bf16, fp32) keeps its case at the start of the label.
    return text if words[:1] and words[0] in _KEEP_CASE else text[0].upper() + text[1:]
