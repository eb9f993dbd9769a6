"""MACHINE_BUSY: processes outside the job held the cores the job may use.

Not the job's fault, and it colours every timing of the run: a step measured beside another busy
process is slower than the same step alone, and what each fix would buy shifts with it. So the
finding is said first (it ranks ahead of the job's findings) and marks the run's timing-based
findings less certain (the engine sets ``certain=False`` on them, see
:func:`stave.diagnose.engine.run_rules`). The estimate is the step model with the other
processes' cores given back, and the job's threads at their configured count (what they were
held to is not what they want): what the job would gain on a quiet machine.

Where the other processes left fewer free cores than torch's intra-op pool has threads (a 2-thread
pool beside one busy process on 2 cores), every parallel op waits at its barrier for the thread
that shares its core with them: the post-run busy-threads probe times the step's own work at the
pool's count and at the free cores, beside them. That gives the job's own way out while the other
process stays (``torch.set_num_threads(free)``), priced by the step model, and a floor under the
quiet estimate (on a quiet machine the job has at least the free cores, with nothing to wait on).
"""

from __future__ import annotations

from stave.analyze.step_inputs import (MACHINE_BUSY_MIN_CORES, MachineLoad, busy_phase_speeds, busy_pool_speed,
                                      machine_load, step_inputs)
from stave.analyze.step_model import COMPUTE_PHASES, StepInputs, estimate
from stave.diagnose.engine import rule
from stave.diagnose.finding import Finding
from stave.diagnose.inputs import DoctorInput
from stave.diagnose.rules._helpers import REPORT_MIN_SPEEDUP, make_finding



def machine_is_busy(load: MachineLoad) -> bool:
    """Other processes held a real share of the job's usable cores (the job's own other ranks on
    the node are the job, not a busy machine)."""
    return load.outside_job_cores is not None and load.outside_job_cores >= MACHINE_BUSY_MIN_CORES


def fewer_threads(inp: DoctorInput, model: StepInputs) -> tuple[int, float, float] | None:
    """(free cores, how much faster the compute phases run with the pool at them beside the other
    processes, the step model's estimate of that); ``None`` where it was not probed or buys nothing
    reportable."""
    probe = inp.record.probes.busy_threads_probe
    speeds = busy_phase_speeds(inp.record, inp.summary, model.serial_s)
    speed = busy_pool_speed(inp.record, inp.summary, model.serial_s, speeds) if speeds is not None else None
    if speeds is None or speed is None or len(probe) < 2:
        return None
    # The probe's ratio is the pool's whole change beside them (its barrier waits, its share of the
    # cores): the compute shrinks by it, the rest of the model as it was.
    after = model.changed(phase_speed={p: model.phase_speed.get(p, 1.0) * speeds[p] for p in COMPUTE_PHASES})
    est = estimate(model, after, inp.summary.step_time_mean_s)
    return (int(probe[1]), speed, est) if est >= REPORT_MIN_SPEEDUP else None


def _busy_threads_evidence(inp: DoctorInput, threads_fix: tuple[int, float, float] | None) -> dict[str, object]:
    """The busy-threads probe's numbers, where it ran."""
    probes = inp.record.probes
    if not probes.busy_threads_probe:
        return {}
    return {"busy_threads_probe": probes.busy_threads_probe,
            "busy_threads_speedup": probes.busy_threads_speedup,
            "busy_threads_elementwise_speedup": probes.busy_threads_elementwise_speedup,
            "fewer_threads_est": threads_fix[2] if threads_fix is not None else None}


@rule("MACHINE_BUSY", kind="doctor")
def machine_busy(inp: DoctorInput) -> Finding | None:
    """Other processes held a real share of the job's usable cores while it ran."""
    record, summary = inp.record, inp.summary
    model = step_inputs(record, summary)
    if model is None:
        return None
    load = machine_load(record, summary)
    if not machine_is_busy(load):
        return None
    outside = load.outside_job_cores
    quiet = max(0.0, model.other_cores - outside)  # the job's own other ranks stay
    # The job's measured busy threads are what the other tenants left it, not what it wants: alone,
    # its configured threads run (at most one per core). During a burst of steal a 2-thread job read
    # 0.97 busy threads, priced a quiet machine at 1.00x, and its quiet median step was 1.3x shorter.
    wants = min(float(load.torch_threads or load.cores), float(load.cores))
    busy = model.changed(compute_threads=max(model.compute_threads, wants))
    est = estimate(busy, busy.changed(other_cores=quiet), summary.step_time_mean_s)
    threads_fix = fewer_threads(inp, model)
    if threads_fix is not None:
        # A quiet machine gives the job at least the free cores with nothing on them to wait for.
        est = max(est, threads_fix[2])
    steal = min(outside, load.steal_cores or 0.0)
    if steal >= outside / 2:
        # A VM's hypervisor ran other guests on its cores: no process here to stop.
        title = (f"The hypervisor gave {steal:.1f} of the job's {load.cores} usable cores to other virtual "
                 "machines while it ran (CPU steal); the timings below are less certain")
        fix = ("# Not a change to the job: this VM's host ran other guests on its cores (steal time).\n"
               "# Run again later, or on a machine with dedicated cores (a larger or dedicated instance),\n"
               "# then run stave doctor again to confirm the findings below.")
    else:
        title = (f"Other processes held {outside:.1f} of the job's {load.cores} usable cores while it ran; "
                 "the timings below are less certain")
        fix = ("# Not a change to the job: run it where nothing else holds its cores, or give it its own:\n"
               "#   taskset -c <free cores> python train.py    (or a cgroup / container CPU limit for the other job)\n"
               "# then run stave doctor again to confirm the findings below.")
    changed: dict[str, object] = {"other_cores": [model.other_cores, quiet]}
    if threads_fix is not None:
        free, speed, est_threads = threads_fix
        threads = load.torch_threads or load.cores
        fix += (f"\n# While it must run beside them: torch.set_num_threads({free})  # the cores they leave free;"
                f"\n#   the step's compute would run {speed:.1f}x faster at {free} than at {threads} threads beside them"
                f" (est. {est_threads:.2f}x)")
        changed["phase_speed (compute, at the free cores' threads)"] = [1.0, round(speed, 3)]
    return make_finding(
        "MACHINE_BUSY",
        est,
        title,
        {
            "other_processes_cores": outside,
            "steal_cores": load.steal_cores,
            "job_ranks_cores": load.job_ranks_cores,
            "cores_usable": load.cores,
            "cores_total": load.cores_total,
            "machine_busy_share": load.machine_busy_share,
            "job_main_cores": load.main_cores,
            "job_workers_cores": load.workers_cores,
            "min_other_cores": MACHINE_BUSY_MIN_CORES,
            **_busy_threads_evidence(inp, threads_fix),
            "model_inputs_changed": changed,
        },
        fix,
        explanation=(
            "The machine's busy CPU minus the job's own process tree (trainer, loader workers, their "
            "children) is work of other processes on the same cores; on a VM, the time the hypervisor "
            "ran other guests on them (steal) counts the same. The job's threads shared the "
            "cores with it, so its steps ran slower than they would alone, and the estimates of the "
            "other findings of this run assume the sharing stays. Estimate: the step model with the "
            "other processes' cores set to 0. Where they left fewer cores free than torch's intra-op "
            "pool has threads, each parallel op waited at its barrier for the thread sharing a core "
            "with them: the probe timed the step's own work at both thread counts beside them, which "
            "prices setting the threads to the free cores (and is a floor under the quiet estimate)."
        ),
    )
