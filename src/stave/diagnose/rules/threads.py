"""THREAD_OVERSUBSCRIPTION and CPU_CONTENTION: the job's threads want more cores than it has.

One cause, one finding. When torch's intra-op pool alone is larger than the usable cores, it is
THREAD_OVERSUBSCRIPTION: chunks queue for a core, the OpenMP barriers spin while they wait, and a
thread that loses its core mid-op stalls the others (the thread probe measures that penalty).
When the pool fits but the input pipeline's CPU (loader workers, or loading in the main process
beside a pin-memory thread) tips the whole process tree over the cores, it is CPU_CONTENTION,
even when the data wait is small: every op of the compute then runs on a fair share of a core.
Both estimates come from the step model (:mod:`stave.analyze.step_model`): the fix is a change
of its inputs and the estimate is the model's step before over after.
"""

from __future__ import annotations

import statistics

from stave.analyze.host import summarize_host
from stave.analyze.pipeline import PipelineSummary, summarize_pipeline
from stave.analyze.step_inputs import counted_products_ratio, machine_load, step_inputs
from stave.analyze.step_model import StepInputs, estimate, step_time
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, dataloader_call, is_gpu, make_finding

# The input pipeline must want at least this many cores' worth of CPU to be named the cause: a
# tenth of a core is within what the pin thread, Python and the monitor take anyway.
CONTENTION_MIN_LOADER_CORES = 0.1
# The top loading stage moved to a batch-level transform runs once over the batch, on the step's
# intra-op threads: its CPU-seconds leave the workers and join the compute. How many of them is not
# known from the run: the same arithmetic (share 1.0: the lower bound of the gain) or none of it
# (0.0: the upper bound), and vectorized torch kernels over a batch can cost a fraction of numpy's
# per-sample calls. Both bounds are priced and the estimate is their geometric mean: with the truth
# anywhere between them it is never further from it than the square root of their ratio, the
# smallest worst case any single number gives. (Free alone read 1.72x against 1.16x measured on a
# numpy augmentation moved to the batch; the full CPU alone named nothing where the fix measured
# 1.18x; docs/benchmarks.md.)
BATCH_TRANSFORM_CPU_SHARES = (1.0, 0.0)
# Stages that are not per-sample transforms: reading/decoding a sample and collating the batch
# cannot move to a batch-level op.
NOT_BATCHABLE_STAGES = frozenset({"load", "collate"})
# A sample whose __getitem__ reads (almost) nothing from storage and has no separate transform
# stages computes the sample inline: its 'load' stage is that per-sample math, batchable like a
# transform. Below one open or read call per ten samples nothing is read per sample (a stray call
# of the monitor or an index lookup, not the sample's bytes).
INLINE_MAX_READS_PER_SAMPLE = 0.1


def _batchable_stage(pipe: PipelineSummary | None) -> tuple[str, float, bool] | None:
    """(stage name, its share of the loading, whether it is the sample's inline work) of the costliest
    stage that could run as one op on the collated batch, or ``None``."""
    if pipe is None:
        return None
    top = next((s for s in pipe.stages if s.name not in NOT_BATCHABLE_STAGES), None)
    if top is not None:
        return top.name, top.share, False
    load = next((s for s in pipe.stages if s.name == "load"), None)
    reads = (pipe.opens_per_sample or 0.0) + (pipe.read_calls_per_sample or 0.0)
    if load is None or pipe.opens_per_sample is None or reads >= INLINE_MAX_READS_PER_SAMPLE:
        return None
    return "load", load.share, True


@rule("THREAD_OVERSUBSCRIPTION", kind="doctor")
def thread_oversubscription(inp: DoctorInput) -> Finding | None:
    """torch runs more intra-op threads than there are usable cores."""
    record, summary = inp.record, inp.summary
    threads = record.config.torch_threads
    model = step_inputs(record, summary)
    if threads is None or model is None or threads <= model.cores:
        return None
    cores = int(model.cores)
    ratio = record.probes.threads_speedup
    host = summarize_host(record)
    evidence = {
        "torch_threads": threads,
        "cores_usable": cores,
        "threads_probe_speedup": ratio,
        "products_ratio_from_run": (counted_products_ratio(record) or (None,))[0],
        "threads_probe_elementwise_speedup": record.probes.threads_elementwise_speedup,
        "threads_probe_source": record.probes.threads_probe_source,
        "compute_penalty": model.oversubscription_penalty,
        "threads_probe": record.probes.threads_probe,
        "involuntary_switches_per_s": host.ctx_involuntary_per_s,
        "procs_running": host.procs_running,
        "model_inputs_changed": {"compute_threads": [threads, cores],
                                 "oversubscription_penalty": [model.oversubscription_penalty, 1.0]},
    }
    fix = (
        f"torch.set_num_threads({cores})  # one intra-op thread per usable core "
        f"(os.sched_getaffinity(0) has {cores})\n"
        f"# and drop OMP_NUM_THREADS/MKL_NUM_THREADS={threads} from the environment, if set there"
    )
    if ratio is None and model.oversubscription_penalty <= 1.0:
        # The setting alone is a fact worth knowing, but without the probe there is no estimate.
        return make_finding(
            "THREAD_OVERSUBSCRIPTION", 1.0,
            f"torch uses {threads} threads on {cores} usable cores (effect not measured)",
            evidence, fix, explanation="The thread probe did not run, so the slowdown is not estimated.",
        )
    est = estimate(model, model.changed(compute_threads=float(cores)), summary.step_time_mean_s)
    if est < REPORT_MIN_SPEEDUP:
        # The setting is still a hazard, but on this run it cost nothing measurable (typically: the
        # machine was busy with other processes, and more threads took a larger share of it).
        return make_finding(
            "THREAD_OVERSUBSCRIPTION", 1.0,
            f"torch uses {threads} threads on {cores} usable cores (no slowdown measured on this run: "
            f"compute {model.oversubscription_penalty:.2f}x slower at {threads})",
            evidence, fix,
            explanation=(
                "The probe timed the same matmul with both thread counts and found no gain from fewer "
                "threads now; on a machine shared with other busy processes extra threads win a larger "
                "share of it. On a quiet machine oversubscription slows every op: re-run there."
            ),
        )
    return make_finding(
        "THREAD_OVERSUBSCRIPTION", est,
        f"torch uses {threads} threads on {cores} usable cores; the step's parallel compute runs "
        f"{model.oversubscription_penalty:.1f}x faster with {cores} (measured on its own work)",
        evidence, fix,
        explanation=(
            "Threads beyond the cores queue for a core and make every op's barrier wait for the "
            "slowest chunk; memory-bound ops between the GEMMs pay it most. The probe timed the "
            "step's GEMMs and the elementwise ops on their outputs at both thread counts, weighted "
            "by their share of the compute (products too slow to time in the oversized pool are "
            "priced from the run itself: their time in its FLOP-counting step over their FLOPs at "
            "the rate one thread per core gave). Estimate: the step model with compute_threads set "
            "to the cores and that measured penalty gone."
        ),
    )


def _contention_fixes(model: StepInputs, top_share: float | None,
                      inline: bool = False) -> dict[str, tuple[StepInputs, ...]]:
    """The candidate splits of the cores, each as changed model inputs (a batch-level transform as
    its two bounds, :data:`BATCH_TRANSFORM_CPU_SHARES`)."""
    out: dict[str, tuple[StepInputs, ...]] = {}
    threads = int(round(model.compute_threads))
    if threads > 1:
        out[f"intra-op threads {threads} -> {threads - 1}"] = (model.changed(compute_threads=float(threads - 1)),)
    if model.workers > 1:
        # Fewest workers whose output still keeps up with the compute (the model's producer time).
        for w in range(1, model.workers):
            fewer = model.changed(workers=w)
            st = step_time(fewer)
            if st.bound == "compute":
                out[f"loader workers {model.workers} -> {w}"] = (fewer,)
                break
    if top_share is not None and top_share > 0:
        moved = model.load_cpu_s * top_share
        name = "the per-sample work in __getitem__ as a batch-level transform" if inline \
            else "the top loading stage as a batch-level transform"
        out[name] = tuple(model.changed(load_cpu_s=model.load_cpu_s - moved,
                                        moved_compute_cpu_s=model.moved_compute_cpu_s + moved * share)
                          for share in BATCH_TRANSFORM_CPU_SHARES)
    return out


@rule("CPU_CONTENTION", kind="doctor")
def cpu_contention(inp: DoctorInput) -> Finding | None:
    """Input-pipeline CPU and compute threads together want more cores than the job may use."""
    record, summary = inp.record, inp.summary
    if is_gpu(record):
        return None
    model = step_inputs(record, summary)
    if model is None or record.config.torch_threads is None or record.config.torch_threads > model.cores:
        return None  # no model, or the thread pools alone oversubscribe: THREAD_OVERSUBSCRIPTION's
    st = step_time(model)
    loader_cores = st.cores_wanted - model.compute_threads - model.other_cores
    if loader_cores < CONTENTION_MIN_LOADER_CORES or model.compute_threads + loader_cores <= model.cores:
        return None  # the job's own threads fit; anything beyond is other processes (MACHINE_BUSY)
    load = machine_load(record, summary)
    if load.machine_busy_share is not None and not load.saturated:
        return None  # the cores had room: no thread waited for one, whatever the counts add up to
    pipe = summarize_pipeline(record)
    top = _batchable_stage(pipe)
    fixes = _contention_fixes(model, top[1] if top is not None else None, inline=top is not None and top[2])
    if not fixes:
        return None
    t = summary.step_time_mean_s
    bounds = {name: [estimate(model, after, t) for after in afters] for name, afters in fixes.items()}
    priced = {name: statistics.geometric_mean(b) for name, b in bounds.items()}
    best = max(priced, key=lambda name: priced[name])
    est = priced[best]
    if est < REPORT_MIN_SPEEDUP:
        return None
    after = fixes[best][0]
    changed = {k: [getattr(model, k), getattr(after, k)]
               for k in ("compute_threads", "workers", "load_cpu_s", "moved_compute_cpu_s")
               if getattr(model, k) != getattr(after, k)}
    lines = []
    if "threads" in best:
        lines.append(f"torch.set_num_threads({int(after.compute_threads)})  # leave a core to the input pipeline")
    elif "workers" in best and pipe is not None:
        lines.append(dataloader_call(pipe.loader, num_workers=after.workers))
    elif top is not None and top[2]:
        lines.append(f"# {pipe.loader.dataset_type if pipe is not None else 'the dataset'}.__getitem__ reads nothing from storage: "
                     "its per-sample work is computation (augmentation);")
        lines.append("# return the raw sample and apply that math to the whole collated batch in the training loop")
        lines.append("# (one vectorized torch op per batch instead of numpy/Python per sample in the workers)")
    else:
        stage = top[0] if top is not None else "the per-sample transform"
        lines.append(f"# apply {stage} to the whole batch (one vectorized op) instead of per sample in the workers,")
        lines.append("# e.g. keep samples uint8 and normalize/augment the collated batch in the training loop")
    others = ", ".join(f"{name}: {v:.2f}x" for name, v in priced.items() if name != best)
    if others:
        lines.append(f"# the model's other splits: {others}")
    return make_finding(
        "CPU_CONTENTION", est,
        f"Compute threads ({model.compute_threads:.1f}) and the input pipeline ({loader_cores:.1f} cores) want "
        f"{model.compute_threads + loader_cores:.1f} of {int(model.cores)} usable cores; fastest split: {best}",
        {
            "cores_usable": model.cores,
            "compute_threads": model.compute_threads,
            "torch_threads": record.config.torch_threads,
            "loader_cores": loader_cores,
            "num_workers": model.workers,
            "load_cpu_s_per_step": model.load_cpu_s,
            "other_processes_cores": model.other_cores,
            "compute_stretch": st.stretch,
            "compute_stretch_cpu": model.compute_stretch_cpu,
            "data_wait_share": summary.breakdown.get("data_wait", 0.0),
            "main_process_cores": load.main_cores,
            "workers_cores": load.workers_cores,
            "fixes_priced": priced,
            "fix_bounds": {name: b for name, b in bounds.items() if len(b) > 1},
            "model_inputs_changed": changed,
        },
        "\n".join(lines),
        explanation=(
            "Every runnable thread gets a fair share of the usable cores, and a parallel op waits for "
            "its slowest thread, so the compute stretches by the cores wanted over the cores there "
            "are, even while the data wait stays small. Estimate: the step model with each split "
            "below; the fastest is named."
        ),
    )
