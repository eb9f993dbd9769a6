"""stave: find the short stave in a PyTorch training job, say what to change, ship the parts that fix it.

The public entry points are the ``stave`` command line (``stave doctor``, ``stave trace``,
``stave pack``, ``stave bench``) and, for those who prefer code, :func:`watch`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "watch"]


def __getattr__(name: str):
    # Lazy: `import stave` must stay cheap (it runs inside the user's process and in loader workers).
    if name == "watch":
        from stave.api import watch

        return watch
    raise AttributeError(f"module 'stave' has no attribute {name!r}")
