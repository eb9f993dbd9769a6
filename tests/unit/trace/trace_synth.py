"""Build small Kineto-shaped traces for tests (times in microseconds, as torch.profiler writes them)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID = 100
MAIN = 100


def op(name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "cpu_op", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step(n: int, ts: float, dur: float, tid: int = MAIN) -> dict:
    return op(f"ProfilerStep#{n}", ts, dur, tid=tid, cat="user_annotation")


def annotation(name: str, ts: float, dur: float, tid: int = MAIN) -> dict:
    return op(name, ts, dur, tid=tid, cat="user_annotation")


def runtime(name: str, ts: float, dur: float, corr: int, tid: int = MAIN) -> dict:
    return op(name, ts, dur, tid=tid, cat="cuda_runtime", correlation=corr)


def pyframe(name: str, ts: float, dur: float, tid: int = MAIN) -> dict:
    return op(name, ts, dur, tid=tid, cat="python_function")


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, device: int = 0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream, "correlation": corr, "External id": corr}}


def memcpy(name: str, ts: float, dur: float, corr: int, nbytes: int, stream: int = 7, device: int = 0) -> dict:
    return {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream, "correlation": corr, "bytes": nbytes}}


def launched(kname: str, launch_ts: float, launch_dur: float, k_ts: float, k_dur: float, corr: int,
             stream: int = 7, tid: int = MAIN) -> list[dict]:
    """A cudaLaunchKernel call and the kernel it launched."""
    return [runtime("cudaLaunchKernel", launch_ts, launch_dur, corr, tid=tid),
            kernel(kname, k_ts, k_dur, corr, stream=stream)]


def write_trace(path: Path, events: list[dict], fmt: str = "pretty", metadata: dict | None = None) -> Path:
    """Write ``events`` as a Kineto JSON object; fmt: pretty | min | gz | array."""
    doc: Any = {"schemaVersion": 1, **(metadata or {}), "traceEvents": events, "traceName": str(path)}
    if fmt == "array":
        text = json.dumps(events)
    elif fmt == "min":
        text = json.dumps(doc, separators=(",", ":"))
    else:
        text = json.dumps(doc, indent=2)
    if fmt == "gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
