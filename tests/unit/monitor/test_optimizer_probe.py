"""The optimizer probe: ratios of the run's implementation to the others, on the run's own tensor sizes."""

from __future__ import annotations

import torch

from stave.analyze.stats import paired_ratio
from stave.capture.config_probe import optimizer_info, param_size_counts
from stave.measure.config import OptimizerInfo
from stave.monitor import optimizer_probe
from stave.monitor.optimizer_probe import fused_optimizer_ratio, optimizer_ratios, probe_sizes, run_implementation


def test_probe_measures_ratios_for_the_other_implementations_without_touching_global_rng():
    state = torch.random.get_rng_state()
    ratios = optimizer_ratios(OptimizerInfo("AdamW", 20_000, 20, foreach=None, fused=None), "cpu")
    assert set(ratios) == {"fused", "foreach"}  # on CPU the default is the per-tensor loop
    assert all(r > 0 for r in ratios.values())
    assert torch.equal(state, torch.random.get_rng_state())
    own_foreach = optimizer_ratios(OptimizerInfo("AdamW", 20_000, 20, foreach=True, fused=None), "cpu")
    assert set(own_foreach) == {"fused", "loop"}


def test_probe_skips_fused_and_unknown_optimizers():
    assert fused_optimizer_ratio(OptimizerInfo("AdamW", 100, 2, fused=True), "cpu") is None
    assert fused_optimizer_ratio(OptimizerInfo("LBFGS", 100, 2), "cpu") is None


def test_run_implementation_follows_torch_defaults():
    cpu = torch.device("cpu")
    assert run_implementation(OptimizerInfo("AdamW", 1, 1, foreach=None), cpu) == "loop"
    assert run_implementation(OptimizerInfo("AdamW", 1, 1, foreach=True), cpu) == "foreach"
    assert run_implementation(OptimizerInfo("AdamW", 1, 1, fused=True), cpu) == "fused"


def test_probe_rebuilds_the_runs_own_sizes_and_caps_the_total(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
    info = optimizer_info(torch.optim.AdamW(model.parameters()))
    assert info.param_sizes == [[128, 1], [32, 1], [16, 3], [2, 1]]
    assert sorted(probe_sizes(info)) == sorted(p.numel() for p in model.parameters())
    # An old record without sizes: equal tensors of the mean size.
    assert probe_sizes(OptimizerInfo("AdamW", 100, 4)) == [25] * 4
    monkeypatch.setattr(optimizer_probe, "MAX_PROBE_VALUES", 89)
    capped = probe_sizes(info)
    assert len(capped) == 6 and sum(capped) <= 89 and capped[0] == int(128 * 89 / 210)


def test_many_distinct_sizes_go_to_power_of_two_buckets():
    counts = param_size_counts(list(range(1, 200)), max_sizes=64)
    assert sum(c for _n, c in counts) == 199
    assert all(n & (n - 1) == 0 for n, _c in counts)
    assert param_size_counts([5, 5, 7]) == [[7, 1], [5, 2]]


def test_a_gain_needs_the_rounds_to_agree():
    # Beside a busy process one round of nine caught the other implementation in a free slot: the
    # median of the paired ratios is 1.0 and there is no gain.
    own = [1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4]
    lucky = [1.4, 0.5, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4]
    assert paired_ratio(own, lucky) == 1.0
    # Won five of nine rounds at 1.5x: a coin does as well a third of the time; reported as 1.0.
    half = [1.0, 1.0, 1.0, 1.0, 1.4, 1.4, 1.4, 1.4, 1.4]
    assert paired_ratio([1.4] * 9, half) == 1.0
    # Won every round by about 1.1x: a gain, the median of the rounds' ratios.
    steady = [1.27, 1.28, 1.26, 1.27, 1.30, 1.25, 1.27, 1.29, 1.27]
    assert abs(paired_ratio([1.4] * 9, steady) - 1.4 / 1.27) < 1e-9
    # Slower is reported as measured (no test needed to say there is no gain).
    assert paired_ratio([1.0] * 5, [1.25] * 5) == 0.8


def test_probe_runs_at_the_threads_it_is_given_and_restores_the_setting(monkeypatch):
    # Beside other busy processes the session passes the free cores' count: every timed step runs
    # at it, and the script's own setting comes back afterwards (also when the probe fails).
    seen: list[int] = []
    real = optimizer_probe._round_s

    def spy(optimizer, device, steps=optimizer_probe.STEPS_PER_ROUND):
        seen.append(torch.get_num_threads())
        return real(optimizer, device, steps)

    monkeypatch.setattr(optimizer_probe, "_round_s", spy)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert optimizer_ratios(OptimizerInfo("SGD", 4_000, 8, foreach=None, fused=None), "cpu", threads=1)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
        seen.clear()
        optimizer_ratios(OptimizerInfo("SGD", 4_000, 8, foreach=None, fused=None), "cpu")
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(saved)


def test_probe_keeps_the_runs_own_step_time_and_more_values_take_longer():
    """The own implementation's median step (the optimizer's time at the probe's threads), which
    OPTIMIZER_UNFUSED uses beside busy processes; none where nothing was probed."""
    small_ratios, small_s = optimizer_probe.optimizer_probe(OptimizerInfo("SGD", 2_000, 4), "cpu", threads=1)
    big_ratios, big_s = optimizer_probe.optimizer_probe(OptimizerInfo("SGD", 4_000_000, 4), "cpu", threads=1)
    assert small_ratios and big_ratios and small_s is not None and big_s is not None
    assert 0 < small_s < big_s  # 2000x the values: the memory traffic shows
    assert optimizer_probe.optimizer_probe(OptimizerInfo("AdamW", 100, 2, fused=True), "cpu") == ({}, None)
