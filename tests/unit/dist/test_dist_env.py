"""Rank detection from the launcher's environment, and the run directory's default name."""

from __future__ import annotations

import pytest

from stave.dist.env import detect, run_id_from, safe_name
from stave.dist.rundir import default_run_dir
from stave.errors import UsageError


def test_torchrun_variables_make_a_rank() -> None:
    env = detect({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1",
                  "TORCHELASTIC_RUN_ID": "job-7", "TORCHELASTIC_RESTART_COUNT": "2", "STAVE_LAUNCH_ID": "abc"})
    assert env is not None
    assert (env.rank, env.local_rank, env.world_size, env.node_rank) == (3, 1, 4, 1)
    assert (env.run_id, env.launch_id, env.restart_count, env.source) == ("job-7", "abc", 2, "torchrun")


def test_srun_variables_make_a_rank_but_salloc_alone_does_not() -> None:
    env = detect({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
                  "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "991"})
    assert env is not None and env.rank == 1 and env.world_size == 2 and env.source == "slurm"
    assert env.run_id == "slurm-991.0"
    # salloc exports SLURM_NTASKS/SLURM_JOB_ID but the shell inside it is not a task of a step.
    assert detect({"SLURM_NTASKS": "4", "SLURM_JOB_ID": "991"}) is None


def test_single_process_is_not_a_rank() -> None:
    assert detect({}) is None
    assert detect({"RANK": "0", "WORLD_SIZE": "1"}) is None


@pytest.mark.parametrize("env", [{"RANK": "x", "WORLD_SIZE": "2"}, {"RANK": "2", "WORLD_SIZE": "2"}])
def test_bad_rank_variables_are_one_clear_error(env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="RANK|rank 2"):
        detect(env)


def test_run_id_prefers_the_rendezvous_id_over_weaker_identities() -> None:
    base = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert run_id_from({**base, "TORCHELASTIC_RUN_ID": "none"}) == "10.0.0.1-29500"
    assert run_id_from({**base, "TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "5"}) == "slurm-5"
    assert run_id_from({**base, "TORCHELASTIC_RUN_ID": "r1", "SLURM_JOB_ID": "5"}) == "r1"


def test_default_run_dir_is_one_safe_path_component() -> None:
    assert safe_name("../../etc/passwd") == "etc_passwd"
    path = default_run_dir(run_id="a b/../c")
    assert path.parent.name == "stave-dist" and "/" not in path.name and ".." not in path.name
