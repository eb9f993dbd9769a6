"""Number formatting: units chosen by magnitude and by key suffix; absent values read "n/a"."""

from __future__ import annotations

import math

import pytest

from stave.report import units as u


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0482, "48.2 ms"), (1.25, "1.25 s"), (0.00035, "350 µs"), (750.0, "12.5 min"), (2.5e-8, "25.0 ns"), (0, "0 s")],
)
def test_seconds_pick_a_readable_unit(seconds: float, text: str) -> None:
    assert u.fmt_seconds(seconds) == text


@pytest.mark.parametrize(
    ("value", "text"), [(512, "512 B"), (1536, "1.50 KiB"), (3 * 2**30, "3.00 GiB"), (25_769_803_776, "24.0 GiB")]
)
def test_bytes_use_binary_prefixes(value: int, text: str) -> None:
    assert u.fmt_bytes(value) == text


@pytest.mark.parametrize(
    "fmt", [u.fmt_seconds, u.fmt_ms, u.fmt_us, u.fmt_bytes, u.fmt_byte_rate, u.fmt_rate, u.fmt_pct, u.fmt_share,
            u.fmt_count, u.fmt_speedup]
)
def test_absent_is_na_never_zero(fmt) -> None:
    assert fmt(None) == u.NA
    assert fmt(math.nan) == u.NA


def test_zero_is_zero_not_absent() -> None:
    assert u.fmt_pct(0.0) == "0.0%"
    assert u.fmt_bytes(0) == "0 B"
    assert u.fmt_share(0.0) == "0.0%"


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("data_wait_s", 0.0941, "94.1 ms"),
        ("wait_ns", 2_000_000, "2.00 ms"),
        ("matmul_s_at_probe_rate", 0.0123, "12.3 ms"),
        ("dataset_bytes", 2**30, "1.00 GiB"),
        ("disk_read_bytes_per_s", 2**20, "1.00 MiB/s"),
        ("samples_per_s", 1234.5, "1,234/s"),
        ("cpu_system_pct", 97.1, "97%"),
        ("data_wait_share", 0.402, "40.2%"),
        ("off_cpu_frac", 0.5, "50.0%"),
        ("bf16_speedup", 0.62, "0.62x"),
        ("threads_ratio", 1.5, "1.50x"),
        ("workers", 4, "4"),
        ("bf16_native", False, "no"),
        ("top_stage", "Resize", "Resize"),
        ("psi_io_some_pct", None, "n/a"),
    ],
)
def test_evidence_values_format_by_key_suffix(key: str, value, text: str) -> None:
    assert u.fmt_value(key, value) == text


def test_long_lists_are_cut_with_a_count() -> None:
    text = u.fmt_value("outlier_steps", list(range(10)))
    assert text.startswith("0, 1, 2, 3, 4, 5")
    assert text.endswith("(+4)")


def test_bar_fills_in_eighths_and_clamps() -> None:
    assert u.fmt_bar(1.0, 4) == "████"
    assert u.fmt_bar(0.5, 4) == "██"
    assert u.fmt_bar(1 / 32, 4) == "▏"
    assert u.fmt_bar(2.0, 3) == "███"
    assert u.fmt_bar(None, 5) == ""


def test_shapes_and_int_lists_stay_unambiguous() -> None:
    assert u.fmt_value("bf16_probe_shape", [1024, 1024, 1024]) == "1024 × 1024 × 1024"
    assert u.fmt_value("outlier_steps", [1200, 2400]) == "1200, 2400"
    assert u.fmt_value("worker_wait_s", [0.5, 1.5]) == "500 ms, 1.50 s"


def test_every_phase_has_a_colour_and_a_label() -> None:
    from stave.measure.steps import PHASES
    from stave.report.palette import PHASE_COLORS, PHASE_LABELS, SEVERITY_COLORS, SEVERITY_STYLES

    assert set(PHASE_COLORS) == set(PHASES) == set(PHASE_LABELS)
    assert len(set(PHASE_COLORS.values())) == len(PHASES)  # no two phases look alike
    assert set(SEVERITY_COLORS) == set(SEVERITY_STYLES) == {"info", "warning", "critical"}


def test_unknown_schema_tag_is_a_clear_error() -> None:
    from stave.errors import FormatError
    from stave.report.schemas import load_schema, schema_filename

    assert schema_filename("stave.doctor/1") == "stave.doctor-1.schema.json"
    assert load_schema("stave.doctor/1")["properties"]["schema"] == {"const": "stave.doctor/1"}
    with pytest.raises(FormatError, match="no schema file for 'stave.nope/1'"):
        load_schema("stave.nope/1")


def test_evidence_labels_name_the_quantity_not_the_unit_suffix() -> None:
    from stave.report.units import evidence_label

    assert evidence_label("forward_backward_s") == "Forward backward time"
    assert evidence_label("data_wait_s") == "Data wait"  # already a duration
    assert evidence_label("runtime_per_step_s") == "Runtime per step"
    assert evidence_label("h2d_bytes") == "Host→device bytes"
    assert evidence_label("read_bytes_per_s") == "Read bytes per second"  # longest suffix first
    assert evidence_label("cpu_system_pct") == "CPU system"  # the value carries the %
    assert evidence_label("data_wait_share") == "Data wait share"
    assert evidence_label("data_wait_frac") == "Data wait share"
    assert evidence_label("matmul_s_at_probe_rate") == "Matmul time at probe rate"
    assert evidence_label("bf16_probe_speedup") == "bf16 probe speedup"  # dtype names keep their case
    assert evidence_label("outlier_steps") == "Outlier steps"


def test_locations_under_the_working_directory_are_shown_relative(tmp_path) -> None:
    from stave.report.findings_view import display_location

    inside = tmp_path / "pkg" / "train.py"
    assert display_location(f"{inside}:93", cwd=str(tmp_path)) == "pkg/train.py:93"
    assert display_location(str(inside), cwd=str(tmp_path)) == "pkg/train.py"
    assert display_location("/elsewhere/train.py:7", cwd=str(tmp_path)) == "/elsewhere/train.py:7"
    assert display_location(f"{tmp_path}2/x.py:1", cwd=str(tmp_path)) == f"{tmp_path}2/x.py:1"  # a sibling, not inside
    assert display_location("<stdin>:3", cwd=str(tmp_path)) == "<stdin>:3"
