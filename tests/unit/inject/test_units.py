"""Each injectable fix unit: applied (it changes what it says), undone (everything back), and not applied (with its reason)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stave.errors import UsageError
from stave.inject.apply import install
from stave.inject.machine import Machine
from stave.inject.registry import all_units, get_unit
from stave.inject.selection import parse_selection, request, selection

CPU = Machine(cuda=False, device_name="cpu", bf16_native=False, fp16_tensor_cores=False, cores=2,
              has_compiler=True, precision=None, precision_reason="this CPU has no native bf16")
CPU_BF16 = Machine(cuda=False, device_name="cpu", bf16_native=True, fp16_tensor_cores=False, cores=2,
                   has_compiler=True, precision="bf16", precision_reason="native bf16")
GPU = Machine(cuda=True, device_name="A100", bf16_native=True, fp16_tensor_cores=True, cores=8,
              has_compiler=True, precision="bf16", precision_reason="native bf16")


def _install(unit_id: str, machine: Machine = CPU, **params):
    unit = get_unit(unit_id)
    assert unit is not None
    return unit.install(unit.validated(params), machine)


def _dataset(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 6, 6, generator=g), torch.randint(0, 4, (n,), generator=g))


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(8))


def test_every_unit_is_declared_completely() -> None:
    units = all_units()
    assert len({u.id for u in units}) == len(units) >= 12
    for unit in units:
        assert unit.changes and unit.undo_doc and unit.no_hit and unit.title
    learning = [u.id for u in units if u.changes_learning]
    assert learning == ["batch_size"]


# --- DataLoader settings ---------------------------------------------------------------------


def test_num_workers_applies_and_undoes() -> None:
    original_init = DataLoader.__init__
    applied = _install("num_workers", num_workers=2)
    loader = DataLoader(_dataset(), batch_size=8)
    assert loader.num_workers == 2 and applied.hits == 1
    applied.undo()
    assert DataLoader.__init__ is original_init
    assert DataLoader(_dataset(), batch_size=8).num_workers == 0


def test_num_workers_leaves_iterable_datasets_alone() -> None:
    applied = _install("num_workers", num_workers=2)
    try:
        loader = DataLoader(_Stream(), batch_size=2)
    finally:
        applied.undo()
    assert loader.num_workers == 0 and applied.hits == 0
    assert "replay" in applied.notes[0]


def test_worker_settings_follow_the_worker_fix_in_either_order() -> None:
    # Installed before num_workers, persistent_workers still sees the loader's new workers.
    persistent = _install("persistent_workers")
    prefetch = _install("prefetch_factor", prefetch_factor=4)
    workers = _install("num_workers", num_workers=1)
    try:
        loader = DataLoader(_dataset(), batch_size=8)
        plain = None
    finally:
        workers.undo()
        plain = DataLoader(_dataset(), batch_size=8)
        prefetch.undo()
        persistent.undo()
    assert loader.persistent_workers and loader.prefetch_factor == 4
    assert not plain.persistent_workers and prefetch.notes and "num_workers=0" in prefetch.notes[0]


def test_pin_memory_is_gpu_only() -> None:
    unit = get_unit("pin_memory")
    assert "no GPU" in unit.not_applicable({}, CPU)
    assert unit.not_applicable({}, GPU) is None


def test_batched_fetch_gives_the_same_batches_in_the_same_order() -> None:
    ds = _dataset(40)
    reference = list(DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3)))
    applied = _install("batched_fetch")
    try:
        batched = DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
        custom = DataLoader(ds, batch_size=8, collate_fn=lambda b: b)
    finally:
        applied.undo()
    got = list(batched)
    assert applied.hits == 1 and batched.batch_size is None
    assert len(got) == len(reference) == 5
    for (x, y), (rx, ry) in zip(got, reference):
        assert isinstance(got[0], list) and torch.equal(x, rx) and torch.equal(y, ry)
    assert custom.batch_size == 8 and any("collate_fn" in n for n in applied.notes)


def test_batched_fetch_leaves_other_datasets_alone() -> None:
    applied = _install("batched_fetch")
    try:
        loader = DataLoader(list(range(10)), batch_size=2)
    finally:
        applied.undo()
    assert loader.batch_size == 2 and applied.hits == 0 and "TensorDataset" in applied.notes[0]


# --- threads -----------------------------------------------------------------------------------


def test_threads_pins_the_count_against_the_script() -> None:
    before = torch.get_num_threads()
    applied = _install("threads", threads=1)
    try:
        torch.set_num_threads(8)  # the script's own call
        during = torch.get_num_threads()
    finally:
        applied.undo()
    assert during == 1 and any("asked for 8" in n for n in applied.notes)
    assert torch.get_num_threads() == before
    torch.set_num_threads(before)  # the real function is back
    assert torch.set_num_threads.__module__ != __name__


# --- autocast ------------------------------------------------------------------------------------


def test_autocast_does_not_apply_without_native_bf16() -> None:
    unit = get_unit("autocast")
    assert "no native bf16" in unit.not_applicable({"dtype": None}, CPU)
    assert "fp16" in unit.not_applicable({"dtype": "fp16"}, CPU_BF16)
    assert unit.not_applicable({"dtype": None}, CPU_BF16) is None


def test_autocast_wraps_the_model_and_returns_fp32() -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    seen = {}
    # On the inner layer: global hooks (the fix's) run before a module's own on the outer call.
    model[0].register_forward_hook(lambda m, a, out: seen.__setitem__("dtype", out.dtype))
    applied = _install("autocast", CPU_BF16)
    try:
        out = model(torch.randn(2, 4))
    finally:
        applied.undo()
    assert seen["dtype"] == torch.bfloat16 and out.dtype == torch.float32 and applied.hits == 1
    assert model(torch.randn(2, 4)).dtype == torch.float32 and applied.hits == 1


def test_autocast_keeps_the_scripts_own_region() -> None:
    model = nn.Linear(4, 3)
    applied = _install("autocast", CPU_BF16)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(torch.randn(2, 4))
    finally:
        applied.undo()
    assert out.dtype == torch.bfloat16 and applied.hits == 0 and "already" in applied.notes[0]


# --- channels_last -----------------------------------------------------------------------------


def test_channels_last_converts_conv_models_and_their_inputs() -> None:
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    mlp = nn.Linear(4, 2)
    inputs = {}
    conv[0].register_forward_pre_hook(lambda m, a: inputs.__setitem__("x", a[0]))
    applied = _install("channels_last")
    try:
        conv(torch.randn(2, 3, 8, 8))
        mlp(torch.randn(2, 4))
        weight_nhwc = conv[0].weight.is_contiguous(memory_format=torch.channels_last)
    finally:
        applied.undo()
    assert weight_nhwc and inputs["x"].is_contiguous(memory_format=torch.channels_last)
    assert applied.hits == 1 and any("Linear" in n for n in applied.notes)
    assert conv[0].weight.is_contiguous()


# --- GPU flags -----------------------------------------------------------------------------------


def test_gpu_flags_do_not_apply_on_cpu() -> None:
    for unit_id in ("tf32", "cudnn_benchmark"):
        assert "no GPU" in get_unit(unit_id).not_applicable({}, CPU)
    assert get_unit("tf32").not_applicable({}, GPU) is None


def test_cudnn_benchmark_sets_and_restores_the_flag() -> None:
    before = torch.backends.cudnn.benchmark
    applied = _install("cudnn_benchmark", GPU)
    during = torch.backends.cudnn.benchmark
    applied.undo()
    assert during is True and torch.backends.cudnn.benchmark == before


# --- optimizer ---------------------------------------------------------------------------------


def _train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    model(torch.randn(4, 4)).sum().backward()
    opt.step()


def test_optimizer_impl_switches_before_the_first_step_with_the_same_update() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = torch.optim.Adam(a.parameters(), lr=0.1), torch.optim.Adam(b.parameters(), lr=0.1)
    torch.manual_seed(1)
    _train_step(a, opt_a)
    applied = _install("optimizer_impl", impl="foreach")
    try:
        torch.manual_seed(1)
        _train_step(b, opt_b)
        switched = opt_b.param_groups[0]["foreach"]
    finally:
        applied.undo()
    assert switched is True and applied.hits == 1
    assert not opt_b.param_groups[0]["foreach"]
    assert torch.allclose(a.weight, b.weight, atol=1e-6)


def test_optimizer_impl_leaves_an_optimizer_with_state_alone() -> None:
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train_step(model, opt)
    applied = _install("optimizer_impl", impl="foreach")
    try:
        _train_step(model, opt)
    finally:
        applied.undo()
    assert applied.hits == 0 and "state" in applied.notes[0]


def test_set_to_none_overrides_false() -> None:
    model = nn.Linear(2, 2)
    model(torch.randn(1, 2)).sum().backward()
    applied = _install("set_to_none")
    try:
        model.zero_grad(set_to_none=False)
    finally:
        applied.undo()
    assert model.weight.grad is None and applied.hits == 1
    model(torch.randn(1, 2)).sum().backward()
    model.zero_grad(set_to_none=False)
    assert model.weight.grad is not None  # undone: the script's False is honoured again


# --- compile -----------------------------------------------------------------------------------


def test_compile_needs_a_compiler_on_cpu() -> None:
    unit = get_unit("compile")
    no_cc = Machine(**{**CPU.__dict__, "has_compiler": False})
    assert "compiler" in unit.not_applicable({"mode": None}, no_cc)
    assert unit.not_applicable({"mode": None}, GPU.__class__(**{**GPU.__dict__, "has_compiler": False})) is None


def test_compile_replaces_the_forward_of_trained_modules_only(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None: compiled.append(fn) or fn)
    model, frozen = nn.Linear(2, 2), nn.Linear(2, 2).eval()
    applied = _install("compile")
    try:
        model(torch.randn(1, 2))
        frozen(torch.randn(1, 2))
        replaced = "forward" in model.__dict__
    finally:
        applied.undo()
    assert replaced and applied.hits == 1 and len(compiled) == 1
    assert "forward" not in model.__dict__ and "forward" not in frozen.__dict__


# --- fixes that change learning --------------------------------------------------------------------


def test_batch_size_needs_the_explicit_flag() -> None:
    with pytest.raises(UsageError, match="changes what is learned"):
        request("batch_size", batch_size=64)
    with pytest.raises(UsageError, match="changes what is learned"):
        parse_selection('{"fixes": [{"id": "batch_size", "params": {"batch_size": 64}}]}')
    sel = parse_selection('{"fixes": [{"id": "batch_size", "params": {"batch_size": 64}}], '
                          '"allow_learning_changes": true}')
    assert sel.changes_learning() == ["batch_size"]


def test_batch_size_scales_the_learning_rate_when_asked() -> None:
    applied = _install("batch_size", batch_size=16, scale_lr=True)
    model = nn.Linear(3 * 6 * 6, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        loader = DataLoader(_dataset(), batch_size=8)
        x, _ = next(iter(loader))
        model(x.flatten(1)).sum().backward()
        opt.step()
    finally:
        applied.undo()
    assert loader.batch_size == 16 and x.shape[0] == 16
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2) and applied.hits == 1


# --- selection and install -------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("not json", "not valid JSON"),
    ('{"fixes": [{"id": "warp_drive"}]}', "no injectable fix"),
    ('{"fixes": [{"id": "num_workers"}]}', "required"),
    ('{"fixes": [{"id": "num_workers", "params": {"num_workers": true}}]}', "must be int"),
    ('{"fixes": [{"id": "num_workers", "params": {"num_workers": -1}}]}', ">= 0"),
    ('{"fixes": [{"id": "optimizer_impl", "params": {"impl": "magic"}}]}', "one of"),
    ('{"fixes": [{"id": "threads", "params": {"threads": 1, "x": 2}}]}', "unknown parameter"),
    ('{"fixes": [{"id": "set_to_none"}, {"id": "set_to_none"}]}', "twice"),
    ('{"fixes": [], "extra": 1}', "unknown key"),
])
def test_bad_selections_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_selection(text)


def test_selection_round_trips_through_json() -> None:
    sel = selection(request("num_workers", num_workers=2), request("optimizer_impl"))
    assert parse_selection(sel.to_json()) == sel
    assert sel.fixes[1].label() == "optimizer_impl(impl=fused)"


def test_install_reports_each_fix() -> None:
    sel = selection(request("pin_memory"), request("set_to_none"), request("num_workers", num_workers=1))
    installed = install(sel, CPU)
    try:
        DataLoader(_dataset(), batch_size=4)
    finally:
        installed.undo()
    report = {r["id"]: r for r in installed.report()}
    assert report["pin_memory"]["status"] == "not_applicable" and "GPU" in report["pin_memory"]["reason"]
    assert report["set_to_none"]["status"] == "no_effect" and "never called" in report["set_to_none"]["reason"]
    assert report["num_workers"]["status"] == "applied"
