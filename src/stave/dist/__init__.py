"""The doctor for multi-process training: torchrun launch, per-rank records, merge, rank analysis.

Each rank runs the ordinary doctor on the user's script in its own process and writes its record
(``stave.record/1``) into a run directory; a merge reads the directory and produces one report
over all ranks. Modules:

- :mod:`stave.dist.env`: which rank this process is (torchrun / SLURM variables) and the run id.
- :mod:`stave.dist.rundir`: the run directory's layout and reading its records safely.
- :mod:`stave.dist.hooks`: what a rank measures beyond the single-process doctor (DDP
  communication waits, unused-parameter search, the first sample indices of each loader).
- :mod:`stave.dist.worker`: what a rank's doctor run (:mod:`stave.doctor.rank`) needs around it:
  SIGTERM as an interruption, the process group destroyed before the final record.
- :mod:`stave.dist.launch`: ``--nproc-per-node``: launching the ranks through torch.distributed.run.
- :mod:`stave.dist.merge`: collecting the records and each rank's status (ok, crashed, killed, ...);
  the doctor diagnoses them together (:func:`stave.doctor.facade.merged_result`).
- :mod:`stave.dist.timing`: per-rank :class:`~stave.measure.ranks.RankTiming` for the rank rules.
- :mod:`stave.dist.sampling`: whether the ranks' sample-index streams overlap.

Usage and the run directory layout: docs/distributed.md.
"""
