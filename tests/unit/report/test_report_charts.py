"""Charts: inline SVG and PNG from small specs, deterministic, honest about absent data."""

from __future__ import annotations

import pytest

from stave.report import charts


def test_inline_svg_has_no_prolog_namespaces_or_metadata() -> None:
    svg = charts.to_svg(charts.StackedBars(x=[1, 2, 3], series={"a": [1, 2, 3], "b": [3, 2, 1]}, title="t"))
    assert svg.startswith("<svg")
    assert "<?xml" not in svg and "<!DOCTYPE" not in svg and "<metadata>" not in svg
    assert "xmlns" not in svg and "http" not in svg
    standalone = charts.to_svg(charts.Bars(labels=["a"], values=[1.0]), standalone=True)
    assert standalone.startswith("<?xml") and 'xmlns="http://www.w3.org/2000/svg"' in standalone


def test_svg_is_deterministic_and_distinct_per_chart() -> None:
    spec = charts.Lines(x=[0, 1, 2], series={"cpu": [10.0, 20.0, 15.0]}, title="CPU")
    first, second = charts.to_svg(spec), charts.to_svg(spec)
    assert first == second
    other = charts.to_svg(charts.Lines(x=[0, 1, 2], series={"cpu": [10.0, 25.0, 15.0]}, title="CPU"))
    ids = lambda svg: set(__import__("re").findall(r'id="(p[0-9a-f]+)"', svg))  # noqa: E731
    assert ids(first) and not ids(first) & ids(other)  # clip-path ids do not collide on one page


def test_png_bytes() -> None:
    png = charts.to_png(charts.Bars(labels=["baseline", "+workers"], values=[1.0, 1.8], value_labels=["1.00x", "1.80x"],
                                    horizontal=True, reference=1.0), dpi=50)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 1000


def test_absent_series_draws_no_line() -> None:
    svg = charts.to_svg(charts.Lines(x=[0, 1, 2], series={"present": [1, None, 3], "absent_counter": [None] * 3}))
    assert "present" in svg
    assert "absent_counter" not in svg


def test_dollar_signs_stay_literal() -> None:
    svg = charts.to_svg(charts.Bars(labels=["$HOME/a", "cost $5 $"], values=[1, 2], title="$x$ and $"))
    assert "$HOME/a" in svg


def test_labels_with_markup_are_escaped_in_svg() -> None:
    svg = charts.to_svg(charts.Bars(labels=["<script>x</script>"], values=[1.0]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="series 'a' has 2 values for 3 x positions"):
        charts.to_svg(charts.StackedBars(x=[1, 2, 3], series={"a": [1, 2]}))
    with pytest.raises(ValueError, match="1 values for 2 labels"):
        charts.to_png(charts.Bars(labels=["a", "b"], values=[1.0]))
