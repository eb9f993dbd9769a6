"""``stave doctor --nproc-per-node N``: start the ranks through torch.distributed.run (torchrun).

stave does not launch processes itself: it builds a torchrun command line (the user's rendezvous
options passed through unchanged) whose workers are ``python -m stave doctor --run-dir DIR
--no-merge ... SCRIPT ARGS``, and runs torchrun's own ``run()`` in this process, which becomes the
elastic agent of this node. When torchrun returns, every local rank has exited.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

from stave.dist.env import LAUNCH_ID_VAR
from stave.errors import InputError, UsageError

log = logging.getLogger(__name__)

_NNODES = re.compile(r"^\d+(:\d+)?$")
_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


@dataclass(frozen=True)
class LaunchOptions:
    """torchrun's options as the user gave them to ``stave doctor`` (``None``: torchrun's default)."""

    nproc_per_node: str
    nnodes: str | None = None
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int | None = None
    standalone: bool = False

    def __post_init__(self) -> None:
        n = self.nproc_per_node
        if not (n in _NPROC_WORDS or (n.isdigit() and int(n) >= 1)):
            raise UsageError(f"--nproc-per-node must be a number >= 1 or one of {', '.join(_NPROC_WORDS)}; got {n!r}")
        if self.nnodes is not None and not _NNODES.match(self.nnodes):
            raise UsageError(f"--nnodes must be N or MIN:MAX, got {self.nnodes!r}")
        if self.node_rank is not None and self.node_rank < 0:
            raise UsageError(f"--node-rank must be >= 0, got {self.node_rank}")
        if self.max_restarts is not None and self.max_restarts < 0:
            raise UsageError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UsageError(f"--master-port must be a TCP port (1-65535), got {self.master_port}")

    @property
    def multi_node(self) -> bool:
        """True when more than one node may join."""
        if self.nnodes is None:
            return False
        return int(self.nnodes.split(":")[-1]) > 1


def torchrun_argv(opts: LaunchOptions, worker_argv: list[str]) -> list[str]:
    """The torchrun command line (without the program name) that runs ``python -m stave <worker_argv>``."""
    argv = ["--nproc-per-node", opts.nproc_per_node]
    pairs = (
        ("--nnodes", opts.nnodes),
        ("--node-rank", opts.node_rank),
        ("--rdzv-backend", opts.rdzv_backend),
        ("--rdzv-endpoint", opts.rdzv_endpoint),
        ("--rdzv-id", opts.rdzv_id),
        ("--rdzv-conf", opts.rdzv_conf),
        ("--master-addr", opts.master_addr),
        ("--master-port", opts.master_port),
        ("--max-restarts", opts.max_restarts),
    )
    for flag, value in pairs:
        if value is not None:
            argv += [flag, str(value)]
    if opts.standalone:
        argv.append("--standalone")
    return [*argv, "-m", "stave", *worker_argv]


@dataclass
class LaunchResult:
    """How the local ranks ended: failed global ranks with their exit code and torchrun's message;
    ``signal`` names the signal that stopped the launcher itself (Ctrl-C, SIGTERM), if one did."""

    failures: dict[int, tuple[int, str]] = field(default_factory=dict)
    signal: str | None = None


def launch(opts: LaunchOptions, worker_argv: list[str], launch_id: str) -> LaunchResult:
    """Run torchrun with the workers; returns when all local ranks have exited."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    argv = torchrun_argv(opts, worker_argv)
    log.info("torchrun %s", " ".join(argv))
    args = torchrun.parse_args(argv)
    previous = os.environ.get(LAUNCH_ID_VAR)
    # torchrun passes this process's environment to the workers: they learn who launched them.
    os.environ[LAUNCH_ID_VAR] = launch_id
    try:
        torchrun.run(args)
    except ChildFailedError as exc:
        return LaunchResult({int(rank): (f.exitcode, f.message) for rank, f in exc.failures.items()})
    except SignalException as exc:
        # The agent stopped its ranks (they write their records on the way out): merge what is there.
        return LaunchResult(signal=exc.sigval.name)
    except RendezvousError as exc:
        raise InputError(f"torchrun rendezvous failed: {exc} (check --rdzv-endpoint/--master-addr and that "
                         "every node was started)") from exc
    finally:
        if previous is None:
            os.environ.pop(LAUNCH_ID_VAR, None)
        else:
            os.environ[LAUNCH_ID_VAR] = previous
    return LaunchResult()
