"""Recording the main thread's Python stack: which frames are the user's, and a compact store.

Frames and whole stacks are interned, and each sample is four integers in typed arrays (24 bytes),
so memory is bounded by the number of distinct lines and stacks the program visits plus 24 bytes
per sample. At :data:`MAX_STACK_SAMPLES` the recorder keeps every other sample and doubles its
interval (the sampler then ticks half as often), so a run of any length stays under ~6 MB of
samples while the proportions between lines, which is what the report reads, are unchanged.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from array import array
from types import FrameType

from stave.measure.stacks import FrameKey, StackProfile

# Deep enough for a training loop inside a framework (Lightning puts ~30 frames above the user's
# step); deeper stacks keep their innermost frames, where the time is spent, under a marker frame.
MAX_STACK_DEPTH = 64
# 2**18 samples is 87 minutes at 50 Hz: 6 MB in arrays, ~30 MB when copied out as lists for a
# record, which the capture does every few seconds. Beyond it the samples are thinned 2:1.
MAX_STACK_SAMPLES = 1 << 18

# Samples closer than this share of the interval to the previous one are dropped: after a thinning
# they would double the density; in normal running they only occur right after a late tick.
MIN_GAP_SHARE = 0.75

TRUNCATED = FrameKey("<truncated>", 0, "<truncated>", False)

# Pseudo-files that hold code the user typed: an interactive cell, a script piped on stdin.
_USER_PSEUDO_PREFIXES = ("<ipython-input-", "<stdin>")
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Directories whose files are not the user's: the standard library (of the venv and of the
    interpreter it was made from), installed packages, and stave itself."""
    candidates: set[str] = set()
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars) if scheme_vars else sysconfig.get_paths()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                candidates.add(paths[key])
    getsitepackages = getattr(site, "getsitepackages", None)
    if getsitepackages is not None:
        candidates.update(getsitepackages())
    candidates.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # src/stave
    roots = {os.path.realpath(c) for c in candidates}
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots))


@functools.lru_cache(maxsize=8192)
def is_user_file(path: str) -> bool:
    """True when ``path`` is the user's own code: not the standard library, not an installed
    package (site-packages/dist-packages), not stave, and not a pseudo-file such as
    ``<frozen importlib._bootstrap>``, ``<string>`` (exec'd or generated code) or torch.fx's
    ``<eval_with_key>.N``. Interactive cells (``<ipython-input-...>``, ``<stdin>``) are the user's."""
    if not path:
        return False
    if path.startswith("<"):
        return path.startswith(_USER_PSEUDO_PREFIXES)
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    if _PACKAGE_DIRS.intersection(parts):
        return False
    return not any(real.startswith(root) for root in _library_roots())


class StackRecorder:
    """Interns frames and stacks and stores samples compactly. Not thread-safe: the caller locks."""

    def __init__(
        self,
        interval_ns: int,
        *,
        max_depth: int = MAX_STACK_DEPTH,
        max_samples: int = MAX_STACK_SAMPLES,
    ) -> None:
        if max_depth < 1 or max_samples < 2:
            raise ValueError(f"max_depth must be >= 1 and max_samples >= 2, got {max_depth}, {max_samples}")
        self.interval_ns = int(interval_ns)
        self._max_depth = max_depth
        self._max_samples = max_samples
        self._frames: list[FrameKey] = []
        self._frame_ids: dict[tuple[str, str, int], int] = {}
        self._stacks: list[tuple[int, ...]] = []
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self._phases: list[str] = []
        self._phase_ids: dict[str, int] = {}
        self._t_ns = array("q")
        self._step = array("q")
        self._phase = array("i")
        self._stack = array("i")
        self.thinned = 0

    def __len__(self) -> int:
        return len(self._t_ns)

    def _frame_id(self, filename: str, function: str, line: int) -> int:
        key = (filename, function, line)
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self._frames)
            self._frames.append(FrameKey(filename, line, function, is_user_file(filename)))
            self._frame_ids[key] = fid
        return fid

    def stack_id(self, frame: FrameType | None) -> int:
        """Intern the stack that ends at ``frame`` (innermost) and return its id."""
        ids: list[int] = []
        depth = 0
        # Walk inward-out; keying on strings, not code objects, because hashing a code object
        # hashes its bytecode and constants (microseconds) while str hashes are cached.
        while frame is not None and depth < self._max_depth:
            code = frame.f_code
            line = frame.f_lineno
            ids.append(self._frame_id(code.co_filename, code.co_qualname, line if line is not None else code.co_firstlineno))
            frame = frame.f_back
            depth += 1
        if frame is not None:
            fid = self._frame_ids.get(("<truncated>", "<truncated>", 0))
            if fid is None:
                fid = len(self._frames)
                self._frames.append(TRUNCATED)
                self._frame_ids[("<truncated>", "<truncated>", 0)] = fid
            ids.append(fid)
        ids.reverse()
        key = tuple(ids)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = len(self._stacks)
            self._stacks.append(key)
            self._stack_ids[key] = sid
        return sid

    def record(self, frame: FrameType | None, t_ns: int, step: int, phase: str) -> None:
        """Store one sample of the stack ending at ``frame``, tagged with the step and phase.

        A sample that comes much sooner than the interval after the last one is dropped, so after
        thinning the density stays uniform even if the caller keeps its old pace.
        """
        if self._t_ns and t_ns - self._t_ns[-1] < MIN_GAP_SHARE * self.interval_ns:
            return
        sid = self.stack_id(frame)
        pid = self._phase_ids.get(phase)
        if pid is None:
            pid = len(self._phases)
            self._phases.append(phase)
            self._phase_ids[phase] = pid
        if len(self._t_ns) >= self._max_samples:
            self._thin()
        self._t_ns.append(t_ns)
        self._step.append(step)
        self._phase.append(pid)
        self._stack.append(sid)

    def _thin(self) -> None:
        # Every other sample, and twice the interval from now on, keeps the density uniform.
        self._t_ns = self._t_ns[::2]
        self._step = self._step[::2]
        self._phase = self._phase[::2]
        self._stack = self._stack[::2]
        self.interval_ns *= 2
        self.thinned += 1

    def profile(self) -> StackProfile:
        """A copy of everything recorded, as the shared :class:`StackProfile` type."""
        phases = self._phases
        samples = [
            [t, step, phases[ph], sid]
            for t, step, ph, sid in zip(self._t_ns, self._step, self._phase, self._stack)
        ]
        return StackProfile(
            interval_ns=self.interval_ns,
            frames=list(self._frames),
            stacks=[list(s) for s in self._stacks],
            samples=samples,
        )
