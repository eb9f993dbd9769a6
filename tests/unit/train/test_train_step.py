"""stave.train: the step applies each switch it claims to, and computes the same update."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stave.errors import UsageError
from stave.train import TrainConfig, build_step, current_impl, train_step, with_impl


def tiny_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)
    )


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def batch(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, 8, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator)


def test_config_rejects_bad_values_with_the_allowed_ones() -> None:
    with pytest.raises(UsageError, match="precision 'fp8'.*fp32, bf16, fp16"):
        TrainConfig(precision="fp8")
    with pytest.raises(UsageError, match="optimizer_impl"):
        TrainConfig(optimizer_impl="turbo")
    with pytest.raises(UsageError, match="compile_mode is set but compile is False"):
        TrainConfig(compile_mode="default")
    assert TrainConfig(precision="bf16", channels_last=True).changed_fields() == {
        "precision": "bf16",
        "channels_last": True,
    }


def test_step_returns_a_detached_device_loss_and_updates_the_weights() -> None:
    model = tiny_net()
    before = [p.detach().clone() for p in model.parameters()]
    opt = sgd(model)
    x, y = batch()
    loss = train_step(model, opt, nn.CrossEntropyLoss(), x, y)
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad and loss.dim() == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_bf16_autocast_runs_the_convolution_in_bf16_and_keeps_the_loss_fp32() -> None:
    seen: list[torch.dtype] = []
    model = tiny_net()
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    step = build_step(model, sgd, nn.CrossEntropyLoss(), TrainConfig(precision="bf16"), "cpu")
    loss = step(*batch())
    assert seen == [torch.bfloat16]
    assert loss.dtype == torch.float32


def test_channels_last_converts_weights_and_inputs() -> None:
    seen: list[bool] = []
    model = tiny_net()
    model[0].register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    step = build_step(model, sgd, nn.CrossEntropyLoss(), TrainConfig(channels_last=True), "cpu")
    step(*batch())
    assert seen == [True]
    assert step.model[0].weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_optimizer_implementations_compute_the_same_update(impl: str) -> None:
    x, y = batch()
    results = {}
    for name in ("default", impl):
        step = build_step(tiny_net(), sgd, nn.CrossEntropyLoss(), TrainConfig(optimizer_impl=name), "cpu")
        for _ in range(3):
            step(x, y)
        results[name] = torch.cat([p.detach().reshape(-1) for p in step.model.parameters()])
        assert current_impl(step.optimizer) == name
    torch.testing.assert_close(results[impl], results["default"], rtol=1e-5, atol=1e-6)


def test_with_impl_keeps_hyper_parameters_and_momentum_state() -> None:
    model = tiny_net()
    opt = sgd(model)
    x, y = batch()
    train_step(model, opt, nn.CrossEntropyLoss(), x, y)
    rebuilt = with_impl(opt, "foreach")
    assert rebuilt.param_groups[0]["lr"] == 0.1 and rebuilt.param_groups[0]["momentum"] == 0.9
    assert rebuilt.param_groups[0]["foreach"] is True
    for p in model.parameters():
        torch.testing.assert_close(rebuilt.state[p]["momentum_buffer"], opt.state[p]["momentum_buffer"])


def test_with_impl_refuses_an_optimizer_without_that_implementation() -> None:
    class Plain(torch.optim.Optimizer):
        def __init__(self, params, lr: float = 0.1) -> None:
            super().__init__(params, {"lr": lr})

        def step(self, closure=None):  # noqa: ANN001
            return None

    with pytest.raises(UsageError, match="Plain has no fused implementation"):
        with_impl(Plain(tiny_net().parameters()), "fused")


def test_adamw_with_parameter_groups_switches_to_fused() -> None:
    model = tiny_net()
    groups = [
        {"params": [p for p in model.parameters() if p.dim() > 1], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.dim() <= 1], "weight_decay": 0.0},
    ]
    opt = with_impl(torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95)), "fused")
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert all(g["fused"] for g in opt.param_groups)


def test_fp16_uses_a_grad_scaler() -> None:
    step = build_step(tiny_net(), sgd, nn.CrossEntropyLoss(), TrainConfig(precision="fp16"), "cpu")
    assert step.scaler is not None
    loss = step(*batch())
    assert torch.isfinite(loss)


@pytest.mark.cuda
def test_cuda_graphs_and_cudnn_benchmark_on_a_gpu() -> None:
    step = build_step(
        tiny_net(), sgd, nn.CrossEntropyLoss(), TrainConfig(cuda_graphs=True, cudnn_benchmark=True), "cuda"
    )
    x, y = batch()
    losses = [step(x.cuda(), y.cuda()) for _ in range(3)]
    assert torch.isfinite(torch.stack(losses)).all()
    assert torch.backends.cudnn.benchmark


def _collect_in_worker(_: int) -> None:
    import gc

    gc.collect()  # frees, in the child, any inherited garbage: a CUDA tensor there would fail


@pytest.mark.cuda
def test_workers_forked_after_a_cuda_graph_capture_survive() -> None:
    # The H100 ladder's fault: a worker forked after the capture freed an inherited CUDA tensor.
    step = build_step(tiny_net(), sgd, nn.CrossEntropyLoss(), TrainConfig(cuda_graphs=True), "cuda")
    x, y = batch()
    data = torch.utils.data.TensorDataset(x.repeat(4, 1, 1, 1), y.repeat(4))
    loader = torch.utils.data.DataLoader(data, batch_size=len(x), num_workers=2, drop_last=True,
                                         multiprocessing_context="fork", worker_init_fn=_collect_in_worker)
    losses = []
    for _ in range(2):  # the second epoch forks new workers after the capture
        for images, labels in loader:
            losses.append(step(images.cuda(), labels.cuda()))
    assert len(losses) == 8 and torch.isfinite(torch.stack(losses)).all()
