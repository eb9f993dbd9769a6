"""The doctor: measure a training run, analyze it, diagnose it (:mod:`stave.doctor.facade`).

- :mod:`stave.doctor.facade`: :class:`~stave.doctor.facade.Doctor` (options + target -> result)
  and :func:`~stave.doctor.facade.diagnose` (records -> result);
- :mod:`stave.doctor.result`: :class:`~stave.doctor.result.DoctorResult`, what the reports render;
- :mod:`stave.doctor.diagnosis`: the rules over one record or one per rank;
- :mod:`stave.doctor.trace_fold`: the ``--profile-steps`` trace folded into the result;
- :mod:`stave.doctor.rank`: one distributed rank's run (``stave.watch()`` is :mod:`stave.api`).

Kept free of imports so ``import stave.doctor.result`` stays cheap for the report renderers.
"""
