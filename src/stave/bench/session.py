"""A configuration ready to time: its model (from the shared initial weights), step and input pipeline.

A window runs whole steps until both a minimum step count and a minimum duration are reached,
and records samples, wall time, the time the step waited for its batch (data wait) and the peak
memory seen during the window. On a GPU the window starts and ends with a device sync, so queued
work is charged to the window that queued it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psutil
import torch

from stave import device as dev
from stave.bench.pipeline import Batch, Pipeline
from stave.bench.settings import RunConfig
from stave.bench.spec import JobSpec
from stave.train.step import TrainStep, build_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Window:
    """One timed window: ``samples`` in ``elapsed_ns``, of which ``wait_ns`` waiting for data."""

    steps: int
    samples: int
    elapsed_ns: int
    wait_ns: int
    peak_mem_bytes: int | None

    @property
    def samples_per_s(self) -> float:
        """Throughput of this window."""
        return self.samples / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0

    @property
    def wait_share(self) -> float:
        """Share of the window spent waiting for the next batch."""
        return self.wait_ns / self.elapsed_ns if self.elapsed_ns else 0.0


def build_model(spec: JobSpec, initial_state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A fresh model of the job with the shared initial weights loaded."""
    model = spec.model()
    model.load_state_dict(initial_state)
    model.train()
    return model


class Session:
    """One configuration, built once and timed in as many windows as the comparison asks for.

    ``fed_batch`` replaces the input pipeline by one device batch fed over and over (the "fed"
    reference: the same step with a free input pipeline).
    """

    def __init__(
        self,
        spec: JobSpec,
        config: RunConfig,
        device: torch.device,
        initial_state: dict[str, torch.Tensor],
        channels_last_inputs: bool,
        seed: int = 0,
        fed_batch: Batch | None = None,
    ) -> None:
        self.spec = spec
        self.config = config
        self.device = device
        self.fed_batch = fed_batch
        self.step: TrainStep = build_step(
            build_model(spec, initial_state), spec.optimizer, spec.loss, config.train, device
        )
        self.pipeline = None if fed_batch is not None else Pipeline(spec, config, device, seed, channels_last_inputs)
        self.first_step_s: float | None = None
        self.steps_done = 0
        self._process = psutil.Process()

    def _batch(self) -> Batch:
        if self.fed_batch is not None:
            return self.fed_batch
        assert self.pipeline is not None
        return self.pipeline.next()

    def run_steps(self, count: int) -> None:
        """Untimed steps (warm-up); the first one's duration is kept as ``first_step_s``."""
        if self.pipeline is not None:
            self.pipeline.resume()
        for _ in range(count):
            start = time.perf_counter_ns()
            inputs, targets = self._batch()
            self.step(inputs, targets)
            if self.first_step_s is None:
                # SYNC: the first step's duration includes compilation; wait for it to finish.
                dev.synchronize(self.device)
                self.first_step_s = (time.perf_counter_ns() - start) / 1e9
            self.steps_done += 1
        dev.synchronize(self.device)
        if self.pipeline is not None:
            self.pipeline.pause()

    def window(self, min_steps: int, min_s: float) -> Window:
        """Time at least ``min_steps`` steps and at least ``min_s`` seconds."""
        if self.pipeline is not None:
            self.pipeline.resume()
        dev.reset_peak_memory(self.device)
        # SYNC: start from an idle device so earlier queued work is not charged to this window.
        dev.synchronize(self.device)
        peak_rss = 0
        wait_ns = 0
        steps = 0
        start = time.perf_counter_ns()
        limit_ns = int(min_s * 1e9)
        while steps < min_steps or time.perf_counter_ns() - start < limit_ns:
            before = time.perf_counter_ns()
            inputs, targets = self._batch()
            wait_ns += time.perf_counter_ns() - before
            self.step(inputs, targets)
            steps += 1
            if not dev.is_cuda(self.device):
                # Host memory is the device memory on a CPU: sample the resident set per step.
                peak_rss = max(peak_rss, self._process.memory_info().rss)
        # SYNC: the window ends when the device has finished its steps.
        dev.synchronize(self.device)
        elapsed = time.perf_counter_ns() - start
        if self.pipeline is not None:
            self.pipeline.pause()
        self.steps_done += steps
        peak = dev.max_memory_allocated_bytes(self.device) if dev.is_cuda(self.device) else peak_rss
        return Window(steps, steps * self._batch_samples(inputs), elapsed, wait_ns, peak)

    def sample_batch(self) -> Batch:
        """One batch from this session's input pipeline (the workers may read while it is fetched)."""
        if self.pipeline is None:
            assert self.fed_batch is not None
            return self.fed_batch
        self.pipeline.resume()
        try:
            return self.pipeline.next()
        finally:
            self.pipeline.pause()

    def _batch_samples(self, inputs: Any) -> int:
        if isinstance(inputs, torch.Tensor):
            return int(inputs.shape[0])
        return self.config.batch_size

    def close(self) -> None:
        """Stop the pipeline's workers and drop the model."""
        if self.pipeline is not None:
            self.pipeline.close()
