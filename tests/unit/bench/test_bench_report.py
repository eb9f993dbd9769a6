"""Ladder reports: JSON against its schema, the terminal table (golden), HTML escaping, the PNG."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from stave.report.bench_html import chart_png, ladder_chart, ladder_html
from stave.report.bench_json import load_schema, to_json
from stave.report.bench_table import ladder_report
from stave.bench.result import BASELINE, KEPT, REVERTED, SKIPPED, LadderResult, RungResult, Trial
from stave.bench.settings import RunConfig

GOLDEN = Path(__file__).parent / "golden" / "ladder_table.txt"


def synthetic_result(unit: str = "samples") -> LadderResult:
    base = RunConfig(32)
    bigger = base.with_changes(batch_size=128)
    bf16 = bigger.with_changes(precision="bf16", channels_last=True)

    def trial(label, config, rate, ratio, x, **kw) -> Trial:
        return Trial(
            label,
            config.changes_from(base),
            config,
            samples_per_s=rate,
            ratio=ratio,
            noise=0.02,
            x_baseline=x,
            data_wait_share=0.01,
            peak_mem_bytes=2**30,
            window_rates=[rate] * 3,
            **kw,
        )

    rungs = [
        RungResult(
            "baseline",
            "baseline",
            BASELINE,
            "the job as written",
            [trial("baseline", base, 80.0, 1.0, 1.0, max_loss_dev=0.0, accepted=True)],
        ),
        RungResult(
            "workers",
            "DataLoader workers",
            REVERTED,
            "no clear gain: 1.01x (0.97-1.05, 3 pairs)",
            [
                trial(
                    "1 worker",
                    base.with_changes(num_workers=1),
                    81.0,
                    1.01,
                    1.01,
                    max_loss_dev=0.0,
                    reason="no clear gain: 1.01x (0.97-1.05, 3 pairs)",
                )
            ],
            revert_kind="speed",
        ),
        RungResult(
            "pin_memory", "pin_memory + non_blocking", SKIPPED, "no GPU (pinning only speeds host-to-GPU copies)"
        ),
        RungResult(
            "batch_size",
            "batch size",
            KEPT,
            "batch 128: 1.40x (1.35-1.44, 3 pairs)",
            [trial("batch 128", bigger, 112.0, 1.4, 1.4, max_loss_dev=0.0, accepted=True)],
        ),
        RungResult(
            "uint8",
            "uint8 + normalize on device",
            REVERTED,
            "inputs changed: channel statistics off by 0.76 sd > 0.1; 1.05x",
            [
                trial(
                    "uint8 <b>",
                    bigger.with_changes(uint8=True),
                    118.0,
                    1.05,
                    1.47,
                    max_loss_dev=0.031,
                    output_dev=0.9,
                    input_dev=0.76,
                    loss_passed=False,
                    reason="inputs changed",
                )
            ],
            revert_kind="loss",
        ),
        RungResult(
            "channels_last",
            "channels_last",
            KEPT,
            "channels_last + autocast bf16: 1.60x (1.55-1.66, 3 pairs)",
            [
                trial(
                    "channels_last + autocast bf16",
                    bf16,
                    180.0,
                    1.6,
                    2.24,
                    max_loss_dev=0.004,
                    output_dev=0.04,
                    accepted=True,
                )
            ],
        ),
    ]
    rungs[3].chosen = rungs[3].trials[0]
    rungs[5].chosen = rungs[5].trials[0]
    rungs[0].chosen = rungs[0].trials[0]
    return LadderResult(
        workload="synthetic",
        description="a made-up ladder <script>",
        unit=unit,
        items_per_sample=64 if unit == "tokens" else 1,
        machine={
            "device": "cpu",
            "device_name": "Test CPU",
            "cores_usable": 2,
            "torch_threads": 2,
            "bf16_native": True,
            "torch": "2.x",
            "load_avg_1m": 0.5,
            "load_avg_1m_end": 0.6,
        },
        options={"quick": False},
        baseline=base,
        final=bf16,
        rungs=rungs,
        baseline_samples_per_s=80.0,
        final_samples_per_s=176.0,
        best_speedup=2.2,
        best_speedup_noise=0.03,
        chain_speedup=2.24,
        fed={"ratio": 0.985, "noise": 0.01, "real_samples_per_s": 176.0, "fed_samples_per_s": 178.7},
        mfu={
            "flops_per_sample": 4.5e8,
            "flops_per_item": 4.5e8,
            "baseline": 0.3,
            "final": 0.2,
            "baseline_peak_flops_per_s": 1.2e11,
            "final_peak_flops_per_s": 4e11,
            "baseline_peak_dtype": "fp32",
            "final_peak_dtype": "bf16",
            "peak_source": "2048x2048 matmul on this CPU",
        },
        loss_check={
            "steps": 4,
            "tolerance": 0.01,
            "output_tolerance": 0.15,
            "input_tolerance": 0.1,
            "noise_factor": 10.0,
        },
        code="model = model.to(device)\n",
        duration_s=12.0,
    )


def render_table(result: LadderResult) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=150, color_system=None, legacy_windows=False).print(ladder_report(result))
    return buffer.getvalue()


def test_json_validates_against_the_schema_and_keeps_the_issue_fields() -> None:
    doc = json.loads(json.dumps(to_json(synthetic_result()), allow_nan=False))
    jsonschema.validate(doc, load_schema())
    assert doc["schema"] == "stave.bench/1"
    assert {"baseline_samples_per_s", "best_speedup", "fed_ratio"} <= set(doc)
    for rung in doc["rungs"]:
        assert {"name", "samples_per_s", "x_baseline", "kept", "reason", "max_loss_dev"} <= set(rung)
    assert doc["rungs"][4]["kept"] is False and doc["rungs"][5]["kept"] is True


def test_schema_rejects_a_report_without_rungs() -> None:
    doc = to_json(synthetic_result())
    doc["rungs"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, load_schema())


def test_tokens_workloads_report_tokens_per_s() -> None:
    doc = to_json(synthetic_result(unit="tokens"))
    jsonschema.validate(doc, load_schema())
    assert doc["final_tokens_per_s"] == pytest.approx(176.0 * 64)
    assert "tokens/s" in render_table(synthetic_result(unit="tokens"))


def test_table_matches_the_golden_output() -> None:
    text = render_table(synthetic_result())
    if os.environ.get("STAVE_UPDATE_GOLDEN"):  # regenerate deliberately, then review the diff like code
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_html_is_self_contained_and_escaped() -> None:
    page = ladder_html(synthetic_result())
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "uint8 &lt;b&gt;" in page
    assert "http://" not in page.replace("http://www.w3.org", "")


def test_chart_has_one_bar_per_timed_rung_and_png_bytes() -> None:
    chart = ladder_chart(synthetic_result())
    assert len(chart.labels) == 5 and chart.reference == 1.0  # the skipped rung has no bar
    assert chart.values[-1] == pytest.approx(2.24)
    assert chart_png(synthetic_result()).startswith(b"\x89PNG\r\n\x1a\n")


def test_mfu_of_uncounted_kernels_is_not_known_and_says_why() -> None:
    result = synthetic_result()
    result.mfu.update(flops_per_sample=None, flops_per_item=None, baseline=None, final=None,
                      uncounted_ops=["aten.mkldnn_rnn_layer", "aten.mkldnn_rnn_layer_backward"])
    jsonschema.validate(json.loads(json.dumps(to_json(result))), load_schema())
    text = " ".join(render_table(result).split())
    assert ("MFU: not known (aten.mkldnn_rnn_layer, aten.mkldnn_rnn_layer_backward have no FLOP formula in "
            "torch.utils.flop_counter)") in text
    assert "MFU: 0.0%" not in text
