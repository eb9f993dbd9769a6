"""THREAD_OVERSUBSCRIPTION: more torch compute threads than cores the process may use.

Intra-op threads split every large op into one chunk per thread and wait for the slowest. With
more threads than cores, chunks queue for a core, the OpenMP barriers spin while they wait, and a
thread that loses its core mid-op stalls all the others: the op runs slower than with one thread
per core. The doctor's probe times the same matmul with the script's thread count and with one
per usable core; their ratio is the measured penalty.
"""

from __future__ import annotations

from stave.analyze.host import summarize_host
from stave.analyze.loading import usable_cores
from stave.analyze.whatif import scale_phases, speedup
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding

# The phases whose time is torch ops spread over the intra-op thread pool.
THREADED_PHASES = ("forward", "backward", "optimizer")


@rule("THREAD_OVERSUBSCRIPTION", kind="doctor")
def thread_oversubscription(inp: DoctorInput) -> Finding | None:
    """torch runs more intra-op threads than there are usable cores."""
    record, summary = inp.record, inp.summary
    threads = record.config.torch_threads
    cores = usable_cores(record)
    if threads is None or threads <= cores or summary.steps == 0:
        return None
    ratio = record.probes.threads_speedup
    host = summarize_host(record)
    evidence = {
        "torch_threads": threads,
        "cores_usable": cores,
        "threads_probe_speedup": ratio,
        "threads_probe": record.probes.threads_probe,
        "involuntary_switches_per_s": host.ctx_involuntary_per_s,
        "procs_running": host.procs_running,
    }
    fix = (
        f"torch.set_num_threads({cores})  # one intra-op thread per usable core "
        f"(os.sched_getaffinity(0) has {cores})\n"
        f"# and drop OMP_NUM_THREADS/MKL_NUM_THREADS={threads} from the environment, if set there"
    )
    if ratio is None:
        # The setting alone is a fact worth knowing, but without the probe there is no estimate.
        return make_finding(
            "THREAD_OVERSUBSCRIPTION",
            1.0,
            f"torch uses {threads} threads on {cores} usable cores (effect not measured)",
            evidence,
            fix,
            explanation="The thread probe did not run, so the slowdown is not estimated.",
        )
    t_new = scale_phases(summary, {p: ratio for p in THREADED_PHASES})
    est = speedup(summary.step_time_median_s, t_new)
    if est < REPORT_MIN_SPEEDUP:
        # The setting is still a hazard, but on this run it cost nothing measurable (typically: the
        # machine was busy with other processes, and more threads took a larger share of it).
        return make_finding(
            "THREAD_OVERSUBSCRIPTION",
            1.0,
            f"torch uses {threads} threads on {cores} usable cores (no slowdown measured on this run: "
            f"probe ratio {ratio:.2f})",
            evidence,
            fix,
            explanation=(
                "The probe timed the same matmul with both thread counts and found no gain from fewer "
                "threads now; on a machine shared with other busy processes extra threads win a larger "
                "share of it. On a quiet machine oversubscription slows every op: re-run there."
            ),
        )
    return make_finding(
        "THREAD_OVERSUBSCRIPTION",
        est,
        f"torch uses {threads} threads on {cores} usable cores; the same matmul runs "
        f"{ratio:.1f}x faster with {cores}",
        evidence,
        fix,
        explanation=(
            "Threads beyond the cores queue for a core and make every op's barrier wait for the "
            "slowest chunk. Estimate: forward, backward and optimizer time divided by the probe's "
            "measured ratio."
        ),
    )
