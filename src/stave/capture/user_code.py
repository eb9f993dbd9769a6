"""Which source files are the user's own code (not the standard library, not packages, not stave)."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig

_STAVE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path)
    return tuple(sorted({os.path.abspath(r) + os.sep for r in roots if r}))


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True for a file of the user's own code.

    Not user code: pseudo-files (``<frozen ...>``, ``<string>``), anything under site-packages or
    dist-packages, the interpreter's own prefixes (standard library), and stave itself. A user's
    virtualenv lies under ``sys.prefix``, so their installed packages are excluded too, while their
    scripts (anywhere else) are included.
    """
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    if path.startswith(_STAVE_DIR + os.sep):
        return False
    return not any(path.startswith(root) for root in _library_roots())
