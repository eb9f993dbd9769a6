"""Which rank this process is, read from the launcher's environment (torchrun, SLURM).

torchrun (torch.distributed.run) sets RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK and
TORCHELASTIC_RUN_ID for every worker; ``srun`` sets SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS.
A process with a world size of 1 is an ordinary single process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from stave.errors import UsageError

# Set by `stave doctor --nproc-per-node` on the ranks it launches, so the launcher can tell its
# own ranks' records from another node's in a shared run directory.
LAUNCH_ID_VAR = "STAVE_LAUNCH_ID"
# torchrun's run id when the user gave no --rdzv-id: shared by unrelated runs, so not an identity.
_NO_RUN_ID = ("", "none")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a multi-process run."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int | None
    run_id: str
    launch_id: str
    restart_count: int
    source: str  # "torchrun" (RANK/WORLD_SIZE) or "slurm"


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer; "
                         "fix the launcher's settings") from None


def run_id_from(env: Mapping[str, str]) -> str:
    """The id every rank of one launch shares: rendezvous id, else SLURM job/step, else master address."""
    rdzv = env.get("TORCHELASTIC_RUN_ID", "")
    if rdzv.lower() not in _NO_RUN_ID:
        return rdzv
    job = env.get("SLURM_JOB_ID")
    if job:
        step = env.get("SLURM_STEP_ID")
        return f"slurm-{job}" + (f".{step}" if step else "")
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if addr and port:
        return f"{addr}-{port}"
    return "run"


def safe_name(text: str) -> str:
    """``text`` made safe as one path component."""
    return _SAFE.sub("_", text).replace("..", "_").strip("._") or "run"


def detect(env: Mapping[str, str] | None = None) -> DistEnv | None:
    """This process's rank, or ``None`` for a single process (no launcher, or a world of one)."""
    env = os.environ if env is None else env
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK", rank)
        node = _int(env, "GROUP_RANK")
        source = "torchrun"
    elif env.get("SLURM_PROCID") is not None and env.get("SLURM_STEP_ID") is not None:
        # srun sets SLURM_STEP_ID; salloc alone does not, and then this is not a rank.
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS", 1)
        local = _int(env, "SLURM_LOCALID", 0)
        node = _int(env, "SLURM_NODEID")
        source = "slurm"
    else:
        return None
    assert rank is not None and world is not None and local is not None
    if world <= 1:
        return None
    if not 0 <= rank < world:
        raise UsageError(f"rank {rank} is outside the world size {world}; check RANK/WORLD_SIZE")
    return DistEnv(
        rank=rank,
        local_rank=local,
        world_size=world,
        node_rank=node,
        run_id=run_id_from(env),
        launch_id=env.get(LAUNCH_ID_VAR, ""),
        restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
        source=source,
    )
