"""Record real CUDA profiler traces of planted pathologies, then run `stave trace` on each.

How the traces beside this file were made (on a lent H100, torch 2.11.0+cu130), kept so they can be
made again on another GPU: ``python3 tests/data/traces/h100/make_traces.py OUTDIR``. Not run by the
test suite (it needs a GPU); tests/unit/trace/test_h100_recorded.py reads its outputs.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

DEV = "cuda"
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
TRACES = os.path.join("/tmp", "gputraces")
os.makedirs(TRACES, exist_ok=True)


def resnetish(width=64):
    import torchvision

    return torchvision.models.resnet18(num_classes=10)


def run(name, step_fn, steps=10, with_stack=False):
    sched = schedule(wait=2, warmup=2, active=4, repeat=1)
    path = os.path.join(TRACES, f"{name}.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 with_stack=with_stack, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for i in range(steps):
            step_fn(i)
            prof.step()
    torch.cuda.synchronize()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(path)
    return path + ".gz"


def sync_item():
    model = resnetish().to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xs = [torch.randn(64, 3, 32, 32, device=DEV) for _ in range(4)]
    ys = [torch.randint(0, 10, (64,), device=DEV) for _ in range(4)]
    hist = []

    def step(i):
        x, y = xs[i % 4], ys[i % 4]
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the habit: per-step logging of loss and accuracy as Python numbers
        hist.append(loss.item())
        hist.append((out.argmax(1) == y).sum().item())
        for p in list(model.parameters())[:20]:
            hist.append(p.grad.norm().item())

    return run("sync_item", step, with_stack=True)


def pageable():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x_host = torch.randn(256, 3, 224, 224)
    y_host = torch.randint(0, 10, (256,))

    def step(i):
        x = x_host.to(DEV)
        y = y_host.to(DEV)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return run("pageable", step)


def launch_bound():
    layers = []
    for _ in range(24):
        layers += [nn.Linear(128, 128), nn.LayerNorm(128), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(128, 10)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(16, 128, device=DEV)
    y = torch.randint(0, 10, (16,), device=DEV)

    def step(i):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return run("launch_bound", step)


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, 96, 96), generator=g, dtype=torch.uint8)
        img = nn.functional.interpolate(img[None].float(), size=(224, 224), mode="bilinear")[0]
        img = (img / 255 - 0.45) / 0.225
        return img, i % 10


def data_wait():
    model = resnetish().to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=64, num_workers=0)
    it = iter(loader)

    def step(i):
        x, y = next(it)
        x, y = x.to(DEV), y.to(DEV)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return run("data_wait", step, steps=9)


def mlp(width=4096, depth=6):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def fp32():
    model = mlp().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 4096, device=DEV)
    y = torch.randint(0, 10, (2048,), device=DEV)

    def step(i):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return run("fp32", step)


def healthy():
    model = mlp().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    xh = torch.randn(2048, 4096).pin_memory()
    yh = torch.randint(0, 10, (2048,)).pin_memory()
    losses = []

    def step(i):
        x, y = xh.to(DEV, non_blocking=True), yh.to(DEV, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())

    return run("healthy", step)


def main():
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    summary = {}
    reports = {}
    for fn in (sync_item, pageable, launch_bound, data_wait, fp32, healthy):
        name = fn.__name__
        t0 = time.time()
        try:
            path = fn()
        except Exception:
            traceback.print_exc()
            continue
        torch.cuda.empty_cache()
        rep = os.path.join(TRACES, f"report-{name}.json")
        r = subprocess.run([sys.executable, "-m", "stave", "trace", path, "--json", rep],
                           capture_output=True, text=True, timeout=120)
        size = os.path.getsize(path)
        print(f"=== {name}: trace {size/1e6:.2f} MB gz, rc={r.returncode}, {time.time()-t0:.1f}s", flush=True)
        print(r.stdout[-3500:], r.stderr[-1500:], flush=True)
        try:
            with open(rep) as f:
                doc = json.load(f)
            summary[name] = [(x.get("id"), x.get("severity"), x.get("est_speedup")) for x in doc.get("findings", [])]
            reports[name] = doc
        except Exception as e:  # noqa: BLE001
            summary[name] = f"no report: {e}"
        if size < 3_000_000:
            shutil.copy(path, os.path.join(OUT, os.path.basename(path)))
    print(json.dumps(summary, indent=1))
    with open(os.path.join(OUT, "trace-reports.json"), "w") as f:
        json.dump(reports, f)


main()
