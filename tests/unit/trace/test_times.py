"""Exact times: integer nanoseconds from the JSON text, whatever the digits and the layout."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from stave.trace.tables import load_trace
from stave.trace.times import MAX_TIME_US, durations_to_ns, event_times_ns, native_times, us_to_ns_exact
from trace_synth import kernel, step, write_trace

# 19 significant digits: a float64 cannot hold them (it lands on a 0.25 µs grid here).
BIG = "1695835535123456.789"


def _ns(text: str) -> int:
    return int((Decimal(text) * 1000).to_integral_value(rounding="ROUND_HALF_UP"))


def test_texts_and_ints_are_exact() -> None:
    values = [BIG, "1695835535123456.001", "12.5", "-0.5", "0.0005", "1.23456", "1e3", 7, "00000000000000000001.5"]
    ns, ok = us_to_ns_exact(values)
    assert ok.all()
    assert ns.tolist() == [_ns(str(v)) for v in values]
    # What a float64 parse would have given differs: the test can fail.
    assert int(float(BIG) * 1000) != _ns(BIG)


def test_not_a_time_is_invalid_not_fatal() -> None:
    ns, ok = us_to_ns_exact(["abc", str(MAX_TIME_US + 1), "1.5.5", [1], "12"])
    assert ok.tolist() == [False, False, False, False, True]
    assert ns.tolist() == [0, 0, 0, 0, 12000]
    assert durations_to_ns(["-3.5", "2.25", None]).tolist() == [0, 2250, 0]


@pytest.mark.parametrize("fmt", ["pretty", "min", "gz"])
def test_big_timestamps_exact_in_every_layout(tmp_path: Path, fmt: str) -> None:
    # Written by hand: json.dumps of a float would already have lost the digits.
    events = [step(1, 0, 10), kernel("k", 1.0, 1.0, corr=1)]
    path = write_trace(tmp_path / f"t.{fmt}.json", events, fmt=fmt)
    raw = path.read_bytes()
    if fmt == "gz":
        import gzip

        raw = gzip.decompress(raw)
    text = raw.decode().replace('"ts": 1.0', f'"ts": {BIG}').replace('"ts":1.0', f'"ts":{BIG}')
    text = text.replace('"dur": 1.0', '"dur": 2.0015').replace('"dur":1.0', '"dur":2.0015')
    assert BIG in text
    if fmt == "gz":
        import gzip

        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    data = load_trace(path)
    assert data.gpu.start.tolist() == [_ns(BIG)]
    assert (data.gpu.end - data.gpu.start).tolist() == [2002]
    assert np.issubdtype(data.gpu.start.dtype, np.int64)


def test_plain_fast_path_matches_exact_parse() -> None:
    # Unsigned decimals of every fraction length, mixed with integers: the fast path.
    rng = np.random.default_rng(0)
    values: list = []
    for _ in range(500):
        whole = str(int(rng.integers(0, 4 * 10**15)))
        digits = int(rng.integers(0, 8))
        frac = "".join(str(int(d)) for d in rng.integers(0, 10, size=digits))
        values.append(whole + ("." + frac if digits else ""))
    values.append(12)
    values.append("0.0005")
    ns, ok = us_to_ns_exact(values)
    assert ok.all()
    assert ns.tolist() == [_ns(str(v)) for v in values]


def test_two_dots_or_a_comma_is_not_misread() -> None:
    ns, ok = us_to_ns_exact(["1.2.3", "5", "7.5"])
    assert ok.tolist() == [False, True, True] and ns.tolist() == [0, 5000, 7500]
    ns, ok = us_to_ns_exact(["1,2", "3.0"])
    assert ok.tolist() == [False, True]


class _Ev:
    """What event_times_ns reads of an event: ts and dur."""

    def __init__(self, ts, dur) -> None:
        self.ts, self.dur = ts, dur


@pytest.mark.skipif(not native_times(), reason="stave._trace_times is not built here (no C compiler at install) or STAVE_NATIVE=0")
@pytest.mark.parametrize("seed", range(5))
def test_native_times_match_the_python_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Random plain spellings (what Kineto writes; floats are whole ns from the C decoder hook), and
    # the odd ones the C path hands back to Python.
    import random

    rng = random.Random(seed)
    spellings = [
        lambda: str(rng.randint(0, 10**16)),
        lambda: f"{rng.randint(0, 10**13)}.{rng.randint(0, 999):03d}",
        lambda: f"{rng.randint(0, 10**15)}.{rng.randint(0, 10**7)}",
        lambda: f"-{rng.randint(0, 10**6)}.{rng.randint(0, 99999)}",
        lambda: rng.randint(-10**16, 10**16),
        lambda: str(MAX_TIME_US + rng.randint(0, 9)),
        lambda: f"{MAX_TIME_US - 1}.9995",
        lambda: None,
        lambda: float(rng.randint(-2**40, 2**50)),
    ]
    odd = [lambda: "1e3", lambda: "0001.5", lambda: "+2.5", lambda: "1.", lambda: "abc", lambda: True]
    for pool in (spellings, spellings + odd):
        events = [_Ev(rng.choice(pool)(), rng.choice(pool)()) for _ in range(300)]
        native = event_times_ns(events)
        monkeypatch.setenv("STAVE_NATIVE", "0")
        python = event_times_ns(events)
        monkeypatch.delenv("STAVE_NATIVE")
        for a, b in zip(native, python):
            assert np.asarray(a).tolist() == np.asarray(b).tolist()


def test_decoder_hook_gives_exact_nanoseconds() -> None:
    from stave.trace.times import ns_times_decoder

    decoder = ns_times_decoder()
    if decoder is None:
        pytest.skip("stave._trace_times is not built here (no C compiler at install) or STAVE_NATIVE=0")
    raw = b'[{"ph":"X","ts":4522235494717.833,"dur":0.0005},{"ph":"X","ts":%s,"dur":1e3}]' % BIG.encode()
    a, b = decoder.decode(raw)
    # Below 2**53 ns: a float of whole ns; beyond (a 19-digit time): the text; exponents: text too.
    assert a.ts == 4522235494717833.0 and a.dur == 1.0 and b.ts == BIG and b.dur == "1e3"
    start, ok, dur = event_times_ns([a, b])
    assert start.tolist() == [4522235494717833, _ns(BIG)] and ok.all() and dur.tolist() == [1, 1000000]


def test_native_switch_and_python_path_agree_on_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [step(1, BIG, "100.0005"), kernel("k", "1695835535123456.7894", "2.5", corr=1)]
    path = write_trace(tmp_path / "t.json", events)
    first = load_trace(path)
    monkeypatch.setenv("STAVE_NATIVE", "0")
    assert not native_times()
    second = load_trace(path)
    assert first.host.start.tolist() == second.host.start.tolist() == [_ns(BIG)]
    assert first.host.end.tolist() == second.host.end.tolist() == [_ns(BIG) + 100001]
    assert first.gpu.start.tolist() == second.gpu.start.tolist() == [_ns("1695835535123456.7894")]
