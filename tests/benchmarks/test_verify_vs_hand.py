"""benchmarks/verify_vs_hand.py: the agreement rule, the docs block, and which scenarios it runs."""

from __future__ import annotations

from pathlib import Path

from benchmarks.verify_vs_hand import DOCS_BEGIN, DOCS_END, Row, injectable_expectations, render_markdown, write_docs


def _row(verify: float | None, hand: list[float], interval: list[float] | None = None, pairs: int = 5) -> Row:
    return Row("s", "THREAD_OVERSUBSCRIPTION", "median_step_s", top="THREAD_OVERSUBSCRIPTION", est_speedup=1.5,
               fixes="threads(threads=2)", verify_status="kept", verify_speedup=verify,
               verify_interval=interval or ([verify, verify] if verify else None), verify_pairs=pairs, hand_ratios=hand)


def test_agreement_within_15_percent_or_inside_the_interval() -> None:
    assert _row(1.50, [1.40, 1.35, 1.45]).agrees  # 1.50 / 1.40 = 1.07
    assert _row(2.00, [1.40]).agrees is False
    assert _row(2.00, [1.40], interval=[1.30, 2.20]).agrees  # hand inside, 5 pairs
    assert _row(2.00, [1.40], interval=[1.30, 2.20], pairs=3).agrees is False  # too few pairs for the interval
    assert _row(None, [1.4]).agrees is None


def test_markdown_and_docs_block(tmp_path: Path) -> None:
    meta = {"date": "2026-11-24", "machine": "cpu", "pairs": 5, "steps": 15, "load_min": 1.0, "load_max": 8.0,
            "command": "python -m benchmarks.verify_vs_hand"}
    text = render_markdown([_row(1.5, [1.4, 1.45]), _row(2.0, [1.0])], meta)
    assert "| s | THREAD_OVERSUBSCRIPTION | `threads(threads=2)` | 1.50x | 1.50x [1.50-1.50] |" in text
    assert "1 of 2 comparable rows" in text and "shared" in text
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\n{DOCS_BEGIN}\nold\n{DOCS_END}\ntail\n")
    write_docs(doc, "new")
    assert doc.read_text() == f"# B\n\n{DOCS_BEGIN}\nnew\n{DOCS_END}\ntail\n"


def test_only_injectable_findings_are_compared() -> None:
    ids = injectable_expectations()
    assert {"THREAD_OVERSUBSCRIPTION", "DATA_CPU_BOUND", "OPTIMIZER_UNFUSED"} <= ids
    assert "SMALL_BATCH" not in ids and "MEMORY_GROWTH" not in ids


def test_the_hand_fix_takes_the_value_the_doctor_named() -> None:
    from benchmarks.scenarios import hand_fix_args
    from benchmarks.scenarios import load_matrix

    io = next(s for s in load_matrix() if s.name == "io_latency_main")
    assert hand_fix_args(io, "num_workers(num_workers=7) + persistent_workers") == ["--fixed-workers", "7"]
    assert hand_fix_args(io, "threads(threads=2)") == []
    other = next(s for s in load_matrix() if s.name == "oversubscription")
    assert hand_fix_args(other, "num_workers(num_workers=7)") == []


def _finding(fid: str, evidence: dict) -> dict:
    return {"id": fid, "severity": "warning", "est_speedup": 1.5, "title": "t", "evidence": evidence, "fix": "f"}


def test_the_matrix_times_the_fix_the_doctor_named() -> None:
    from benchmarks.scenarios import load_matrix, named_fix_args

    matrix = {s.name: s for s in load_matrix()}
    io = matrix["io_latency"]
    workers = [_finding("DATA_IO_BOUND", {"suggested_workers": 9})]
    assert named_fix_args(io, workers) == ["--fixed-workers", "9"]
    # SMALL_BATCH's fix is the batch it names: the samples per step times the growth.
    tiny = matrix["tiny_batch"]
    batch = [_finding("SMALL_BATCH", {"batch_growth": 8, "samples_per_step": 2.0, "micro_batches_per_step": 1})]
    assert named_fix_args(tiny, batch) == ["--fixed-batch-size", "16"]
    # No expected finding, or a scenario without hand_params: the script's own --fixed.
    assert named_fix_args(tiny, workers) == []
    assert named_fix_args(matrix["oversubscription"], workers) == []


def test_a_named_stage_is_timed_without_it_and_workers_with_them() -> None:
    from benchmarks.scenarios import fix_inputs_of, load_matrix, named_fix_args

    cpu = {s.name: s for s in load_matrix()}["cpu_transforms"]
    stage = [_finding("DATA_CPU_BOUND", {"top_stage": "GaussianBlur",
                                         "model_inputs_changed": {"load_cpu_s": [0.04, 0.02]}})]
    args = named_fix_args(cpu, stage)
    assert args == ["--fixed-drop-stage", "GaussianBlur"]
    assert fix_inputs_of(cpu, args) == ["load_cpu_s"]
    workers = [_finding("DATA_CPU_BOUND", {"suggested_workers": 2, "top_stage": "GaussianBlur",
                                           "model_inputs_changed": {"workers": [0, 2]}})]
    args = named_fix_args(cpu, workers)
    assert args == ["--fixed-workers", "2"]
    assert fix_inputs_of(cpu, args) == ["workers"]
    # The script's own --fixed (no option given) starts workers; the stage option is only for a named stage.
    assert fix_inputs_of(cpu, []) == ["workers"]


def test_every_hand_option_is_one_its_script_takes() -> None:
    from benchmarks.scenarios import PLANTED_DIR, load_matrix

    for scenario in load_matrix():
        source = (PLANTED_DIR / scenario.script).read_text(encoding="utf-8")
        for _param, option in scenario.hand_params:
            # planted_args(..., fixed_workers=0) declares --fixed-workers.
            assert f"{option[2:].replace('-', '_')}=" in source, (scenario.name, option)
