"""Which kernels cuBLAS/cuDNN pick per precision on this GPU, with the launching op's dtypes.

python3 tests/data/traces/h100/kernel_names.py OUTDIR (on a GPU; not run by the tests)
"""

import gzip
import json
import os
import shutil
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

OUT = sys.argv[1]
DEV = "cuda"
rows = []


def record(label, fn, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    fn()
    torch.cuda.synchronize()
    path = f"/tmp/kn-{label}.json"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
        fn()
        torch.cuda.synchronize()
    p.export_chrome_trace(path)
    d = json.load(open(path))
    ev = d["traceEvents"]
    ext_op = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and "args" in e and "External id" in e["args"]:
            ext_op.setdefault(e["args"]["External id"], e)
    for e in ev:
        if e.get("cat") == "kernel":
            op = ext_op.get(e.get("args", {}).get("External id"))
            rows.append({"label": label, "kernel": e["name"][:200],
                         "op": op["name"] if op else None,
                         "types": (op or {}).get("args", {}).get("Input type")})
    if label in ("bf16_linear", "fp32_conv"):
        with open(path, "rb") as f, gzip.open(os.path.join(OUT, f"kn-{label}.json.gz"), "wb") as g:
            shutil.copyfileobj(f, g)


def mm(dtype, n=2048):
    a = torch.randn(n, n, device=DEV, dtype=dtype, requires_grad=True)
    b = torch.randn(n, n, device=DEV, dtype=dtype)

    def f():
        (a @ b).sum().backward()
    return f


def lin(autocast_dtype=None):
    m = nn.Sequential(nn.Linear(1000, 4096), nn.ReLU(), nn.Linear(4096, 1000)).to(DEV)
    x = torch.randn(512, 1000, device=DEV)

    def f():
        if autocast_dtype:
            with torch.autocast("cuda", dtype=autocast_dtype):
                y = m(x).float().sum()
        else:
            y = m(x).sum()
        y.backward()
    return f


def conv(autocast_dtype=None, cl=False):
    m = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 64, 3, padding=1)).to(DEV)
    x = torch.randn(32, 64, 56, 56, device=DEV)
    if cl:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)

    def f():
        if autocast_dtype:
            with torch.autocast("cuda", dtype=autocast_dtype):
                y = m(x).float().sum()
        else:
            y = m(x).sum()
        y.backward()
    return f


def attn(dtype):
    q = torch.randn(8, 16, 1024, 64, device=DEV, dtype=dtype, requires_grad=True)

    def f():
        nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    return f


record("fp32_mm", mm(torch.float32))
record("tf32_mm", mm(torch.float32), tf32=True)
record("fp16_mm", mm(torch.float16))
record("bf16_mm", mm(torch.bfloat16))
record("fp32_mm_odd", mm(torch.float32, 1001))
record("bf16_mm_odd", mm(torch.bfloat16, 1001))
record("fp32_linear", lin())
record("tf32_linear", lin(), tf32=True)
record("bf16_linear", lin(torch.bfloat16))
record("fp16_linear", lin(torch.float16))
record("fp32_conv", conv())
record("tf32_conv", conv(), tf32=True)
record("bf16_conv", conv(torch.bfloat16))
record("bf16_conv_cl", conv(torch.bfloat16, True))
record("fp16_conv_cl", conv(torch.float16, True))
record("bf16_attn", attn(torch.bfloat16))
record("fp32_attn", attn(torch.float32))
with open(os.path.join(OUT, "kernel-names.json"), "w") as f:
    json.dump(rows, f, indent=0)
seen = set()
for r in rows:
    key = (r["label"], r["kernel"][:90])
    if key in seen:
        continue
    seen.add(key)
    print(r["label"], "|", r["kernel"][:110], "|", r["op"], "|", (r["types"] or [])[:2])
