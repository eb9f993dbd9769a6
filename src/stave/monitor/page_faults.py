"""Minor page faults of this process: how many fresh pages the training touched.

A step that frees its large temporaries back to the OS (glibc trims the heap's free top, and
returns chunks above its mmap threshold at once) touches fresh pages for them again in the next
step, and each 4 KiB page costs a fault and its zeroing. Code that materializes large matrices
(eager attention's ``[seq, seq]`` scores) pays that on top of its arithmetic, so what it would
save depends on whether the run was in that regime: the fault count over the counted steps says.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

# /proc/<pid>/stat's minflt is field 10 (1-based); fields after the command name (which may hold
# spaces and parentheses) start at field 3.
_MINFLT_AFTER_COMM = 10 - 3


def minor_faults() -> int | None:
    """This process's minor faults so far (all its threads), or None where /proc does not say."""
    # os.open, not open(): the doctor's own reads must not count as the dataset's opens.
    try:
        fd = os.open("/proc/self/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        fields = text[text.rindex(b")") + 2:].split()
        return int(fields[_MINFLT_AFTER_COMM])
    except (ValueError, IndexError):
        log.debug("unreadable /proc/self/stat")
        return None


def page_bytes() -> int:
    """The OS page size in bytes (4 KiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4096

