"""The doctor's session freezes the objects that exist when the script starts, and thaws them after.

Under the doctor a forked loader worker started with the collector further along than plainly
(its imports, torch's, the hooks): the worker's first allocations ran a full collection over every
object it inherited, 0.20-0.26 s a worker on a 2-core EPYC, which DATA_WORKER_STARTUP priced as
the job's cost (worker_startup: 8.9x estimated against 4.6-5.1x measured). Frozen, those objects
are outside every collection until the session stops.
"""

from __future__ import annotations

import gc

from stave.capture.session import DoctorOptions, DoctorSession


def _collectable(obj: object) -> bool:
    """Whether the cyclic collector still looks at ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


def test_the_session_freezes_at_start_and_thaws_at_stop() -> None:
    assert gc.get_freeze_count() == 0
    before = [[0]]  # made before the script starts: the doctor's and torch's objects are such
    session = DoctorSession(DoctorOptions(probes=False, stacks=False))
    session.start()
    try:
        assert gc.get_freeze_count() > 1000
        assert not _collectable(before)
        later = [[1]]  # the script's own objects stay collectable
        assert _collectable(later)
    finally:
        session.stop()
    assert gc.get_freeze_count() == 0
    assert _collectable(before)


def test_a_process_that_froze_its_own_objects_keeps_them_frozen() -> None:
    mine = [[2]]
    gc.freeze()
    try:
        session = DoctorSession(DoctorOptions(probes=False, stacks=False))
        session.start()
        session.stop()
        assert not _collectable(mine)
    finally:
        gc.unfreeze()
    assert _collectable(mine)
