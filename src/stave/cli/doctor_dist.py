"""The distributed side of ``stave doctor``: launch ranks, run as a rank, or merge a run directory.

Three modes, chosen from the arguments and the environment (docs/distributed.md):

- ``--nproc-per-node N`` (with torchrun's rendezvous options): start the ranks through
  torch.distributed.run, then merge their records into one report;
- inside a launch the user made (RANK/WORLD_SIZE from torchrun, or srun's SLURM variables): run as
  that rank, write its record to the run directory; rank 0 then waits for the others and merges
  (``--no-merge``: record only);
- ``--merge DIR``: merge the records a run left in DIR.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from stave.cli.common import check_outputs, fails_on
from stave.cli.doctor_args import Progress, target_from, validate
from stave.errors import UsageError

# Rank 0 (or the launcher on the first node) waits this long for the other ranks' final records:
# ranks stop at the same step, so they finish within seconds of each other; the slack covers the
# probes one rank per node runs at the end and a slow shared file system.
DEFAULT_MERGE_TIMEOUT_S = 120.0
# A launch stopped by a signal (Ctrl-C, SIGTERM) exits like an interrupted single run.
EXIT_INTERRUPTED = 130
# The record interval may be shortened but not stretched past the 10 s the records promise.
MAX_RECORD_INTERVAL_S = 10.0


def add_dist_options(p: argparse.ArgumentParser) -> None:
    """Options for multi-process runs (torchrun's names, either spelling, passed through to torch.distributed.run)."""
    g = p.add_argument_group("distributed", "launch through torchrun, record every rank, merge one report "
                             "(see docs/distributed.md)")
    torchrun = (
        ("--nproc-per-node", {"metavar": "N", "help": "launch N ranks on this node through torch.distributed.run"}),
        ("--nnodes", {"metavar": "N|MIN:MAX", "help": "torchrun: number of nodes"}),
        ("--node-rank", {"type": int, "metavar": "R", "help": "torchrun: this node's rank (static rendezvous)"}),
        ("--rdzv-backend", {"metavar": "NAME", "help": "torchrun: rendezvous backend (c10d, static)"}),
        ("--rdzv-endpoint", {"metavar": "HOST:PORT", "help": "torchrun: rendezvous endpoint"}),
        ("--rdzv-id", {"metavar": "ID", "help": "torchrun: rendezvous id (also names the default run directory)"}),
        ("--rdzv-conf", {"metavar": "K=V,...", "help": "torchrun: extra rendezvous settings"}),
        ("--master-addr", {"metavar": "HOST", "help": "torchrun: address of the rank-0 node (static rendezvous)"}),
        ("--master-port", {"type": int, "metavar": "PORT", "help": "torchrun: port on the rank-0 node"}),
        ("--max-restarts", {"type": int, "metavar": "N", "help": "torchrun: restarts of the worker group on failure"}),
    )
    for flag, kwargs in torchrun:
        # torchrun accepts both spellings (--nproc-per-node and --nproc_per_node): so does stave.
        spellings = [flag] if "-" not in flag[2:] else [flag, "--" + flag[2:].replace("-", "_")]
        g.add_argument(*spellings, **kwargs)  # type: ignore[arg-type]
    g.add_argument("--standalone", action="store_true", help="torchrun: single-node rendezvous on a free port")
    g.add_argument("--run-dir", metavar="DIR",
                   help="where every rank writes its record (shared storage for several nodes); "
                   "default ./stave-dist/<run id>")
    g.add_argument("--no-merge", action="store_true",
                   help="as a rank: only write this rank's record (merge later with --merge DIR)")
    g.add_argument("--merge", metavar="DIR", help="merge the rank records in DIR into one report (runs nothing)")
    g.add_argument("--merge-timeout", type=float, metavar="S",
                   help=f"seconds to wait for the other ranks' final records (default {DEFAULT_MERGE_TIMEOUT_S:.0f}; "
                   "0 with --merge)")
    g.add_argument("--record-interval", type=float, default=MAX_RECORD_INTERVAL_S, metavar="S",
                   help=f"each rank rewrites its record at least every S seconds (default {MAX_RECORD_INTERVAL_S:.0f})")


_TORCHRUN_ONLY = ("nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "master_addr",
                  "master_port", "max_restarts")


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` the user gave, as flags."""
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) not in (None, False)]


def dist_mode(args: argparse.Namespace) -> str | None:
    """"merge", "launch", "rank", "misused" (distributed options on one process), or None."""
    from stave.dist.env import detect

    if getattr(args, "merge", None):
        return "merge"
    if getattr(args, "nproc_per_node", None):
        return "launch"
    if detect() is not None:
        return "rank"
    if _given(args, (*_TORCHRUN_ONLY, "standalone", "run_dir", "no_merge", "merge_timeout")):
        return "misused"
    return None


def run_distributed(args: argparse.Namespace, mode: str) -> int:
    """Run one of the distributed modes; returns the exit code."""
    _validate(args, mode)
    if mode == "merge":
        return _merge(args)
    if mode == "launch":
        return _launch(args)
    return _rank(args)


def _validate(args: argparse.Namespace, mode: str) -> None:
    validate(args)
    if getattr(args, "profile_steps", 0):
        raise UsageError("--profile-steps is for one process; for several ranks record a torch.profiler trace per "
                         "rank and run `stave trace DIR`")
    if not 0 < args.record_interval <= MAX_RECORD_INTERVAL_S:
        raise UsageError(f"--record-interval must be > 0 and <= {MAX_RECORD_INTERVAL_S:.0f} s, "
                         f"got {args.record_interval}")
    if args.merge_timeout is not None and args.merge_timeout < 0:
        raise UsageError(f"--merge-timeout must be >= 0, got {args.merge_timeout}")
    if mode == "merge" and (args.target or args.module):
        raise UsageError("--merge DIR reads a finished run and takes no script")
    if mode != "launch":
        torchrun_only = _given(args, (*_TORCHRUN_ONLY, "standalone"))
        if torchrun_only:
            raise UsageError(f"{torchrun_only[0]} is a torchrun option: give it with --nproc-per-node N")
    if mode == "misused":
        flag = _given(args, ("run_dir", "no_merge", "merge_timeout"))[0]
        raise UsageError(f"{flag} is for several processes: add --nproc-per-node N, or run under torchrun/srun")


def _outputs(args: argparse.Namespace) -> None:
    check_outputs((args.json, "--json"), (args.html, "--html"), (args.timeline, "--timeline"),
                  (args.flamegraph, "--flamegraph"))


def _show(result: Any, args: argparse.Namespace) -> None:
    from stave.report.show import show_and_write

    show_and_write(result, json_path=args.json, html_path=args.html, timeline_path=args.timeline,
                   flamegraph_path=args.flamegraph, quiet=bool(args.quiet))


def _exit_code(got: Any, result: Any, args: argparse.Namespace,
               failures: dict[int, tuple[int, str]] | None = None) -> int:
    """The exit code of the rank that failed first (killed before crashed before interrupted; a
    signal counts as 128+N), as a single run passes its script's code through; else --fail-on."""
    order = {"killed": 0, "crashed": 1, "interrupted": 2}
    failed: list[tuple[int, int, int]] = []
    for status, record in zip(got.statuses, got.records):
        rank = record.run.rank
        code = record.run.script_exit_code or (failures or {}).get(rank, (1, ""))[0] or 1
        if status in order:
            failed.append((order[status], rank, code))
        elif record.run.script_exit_code:
            failed.append((len(order), rank, record.run.script_exit_code))
    if failed:
        code = min(failed)[2]
        return 128 - code if code < 0 else code
    if got.missing:
        return 1
    return 1 if fails_on(result.findings, args.fail_on) else 0


def _merge_and_show(run_dir: Path, wait_s: float, args: argparse.Namespace,
                    failures: dict[int, tuple[int, str]] | None = None) -> int:
    from stave.dist.merge import collect
    from stave.doctor.facade import merged_result

    got = collect(run_dir, wait_s=wait_s)
    result = merged_result(got)
    _show(result, args)
    return _exit_code(got, result, args, failures)


# --- modes -----------------------------------------------------------------------------------------


def _merge(args: argparse.Namespace) -> int:
    _outputs(args)
    return _merge_and_show(Path(args.merge), args.merge_timeout or 0.0, args)


def _worker_argv(args: argparse.Namespace, run_dir: Path, target: Any) -> list[str]:
    argv = ["doctor", "--run-dir", str(run_dir), "--no-merge", "--record-interval", str(args.record_interval)]
    if args.steps is not None:
        argv += ["--steps", str(args.steps)]
    if args.warmup is not None:
        argv += ["--warmup", str(args.warmup)]
    if args.no_probes:
        argv.append("--no-probes")
    if args.quiet:
        argv.append("--quiet")
    if target.module:
        return [*argv, "-m", target.name, *target.args]
    return [*argv, "--", target.name, *target.args]


def _launch(args: argparse.Namespace) -> int:
    from stave.dist import rundir
    from stave.dist.launch import LaunchOptions, launch
    from stave.dist.merge import collect, collect_once
    from stave.doctor.facade import merged_result

    opts = LaunchOptions(
        nproc_per_node=str(args.nproc_per_node), nnodes=args.nnodes, node_rank=args.node_rank,
        rdzv_backend=args.rdzv_backend, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
        rdzv_conf=args.rdzv_conf, master_addr=args.master_addr, master_port=args.master_port,
        max_restarts=args.max_restarts, standalone=args.standalone,
    )
    target = target_from(args)
    target.check()
    _outputs(args)
    named_rdzv = args.rdzv_id not in (None, "", "none")
    if opts.multi_node and args.run_dir is None and not named_rdzv:
        raise UsageError("with several nodes give --run-dir DIR on storage every node sees (or --rdzv-id ID), "
                         "so all ranks write to the same directory")
    run_dir = Path(args.run_dir) if args.run_dir else rundir.default_run_dir(
        run_id=args.rdzv_id if named_rdzv else rundir.new_run_id())
    rundir.prepare(run_dir)
    if not opts.multi_node:
        rundir.clear_records(run_dir)  # a one-node launch owns its directory: no stale ranks
    err = Console(stderr=True)
    if not args.quiet:
        err.print(f"stave doctor: launching {opts.nproc_per_node} rank(s) per node through torch.distributed.run; "
                  f"records in {run_dir}", highlight=False)
    launch_id = uuid.uuid4().hex[:12]
    outcome = launch(opts, _worker_argv(args, run_dir, target), launch_id)
    wait_s = 0.0
    if opts.multi_node:
        now = collect_once(run_dir)
        if not _merges_here(now, launch_id, args.node_rank):
            if not args.quiet:
                err.print(f"stave doctor: this node's ranks are done; the node that ran rank 0 writes the merged "
                          f"report (or run: stave doctor --merge {run_dir})", highlight=False)
            mine = [r for r in now.records if r.dist.launch_id == launch_id]
            codes = [r.run.script_exit_code for r in mine if r.run.script_exit_code]
            return codes[0] if codes else (1 if outcome.failures else 0)
        wait_s = args.merge_timeout if args.merge_timeout is not None else DEFAULT_MERGE_TIMEOUT_S
    got = collect(run_dir, wait_s=wait_s)
    result = merged_result(got)
    if outcome.signal is not None:
        result.notes.append(f"the launcher received {outcome.signal} and stopped the ranks")
    _show(result, args)
    code = _exit_code(got, result, args, outcome.failures)
    return code if code or outcome.signal is None else EXIT_INTERRUPTED


def _merges_here(got: Any, launch_id: str, node_rank: int | None) -> bool:
    """The launcher whose workers included rank 0 merges; without rank 0's record, the one given
    ``--node-rank 0`` does (with c10d rendezvous and no rank 0 record: none, merge with --merge)."""
    for record in got.records:
        if record.run.rank == 0:
            return bool(record.dist.launch_id == launch_id)
    return node_rank == 0


def _rank(args: argparse.Namespace) -> int:
    from stave.dist import rundir
    from stave.dist.env import detect
    from stave.doctor.rank import run_rank

    env = detect()
    assert env is not None
    target = target_from(args)
    target.check()
    merging = env.rank == 0 and not args.no_merge
    if merging:
        _outputs(args)
    run_dir = Path(args.run_dir) if args.run_dir else rundir.default_run_dir(env)
    rundir.prepare(run_dir)
    err = Console(stderr=True)
    quiet = bool(args.quiet)
    if env.rank == 0 and not quiet and not env.launch_id:  # under stave's launcher, it speaks
        command = escape(f"{target.name} {' '.join(target.args)}".rstrip())  # the user's text, not markup
        err.print(f"[bold]stave doctor[/]: rank 0 of {env.world_size}: running {command}; records in "
                  f"{escape(str(run_dir))}", highlight=False, soft_wrap=True)
    progress = Progress(err) if env.rank == 0 and not quiet else None
    run = run_rank(target, env, run_dir, steps=args.steps, warmup=args.warmup, probes=not args.no_probes,
                   record_interval_s=args.record_interval, on_step=progress)
    if not merging:
        if not quiet and not env.launch_id:  # under stave's own launcher the launcher reports
            err.print(f"stave doctor: rank {env.rank}: {len(run.record.steps)} steps recorded in {escape(str(run.record_path))}",
                      highlight=False, soft_wrap=True)
        return run.outcome.exit_code
    if not quiet:
        err.print(f"stave doctor: rank 0 done ({len(run.record.steps)} steps); waiting for the other ranks' records",
                  highlight=False)
    wait_s = args.merge_timeout if args.merge_timeout is not None else DEFAULT_MERGE_TIMEOUT_S
    return _merge_and_show(run_dir, wait_s, args)
