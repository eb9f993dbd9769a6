"""What ``stave pack`` can read: an ImageFolder tree, a CSV or JSONL list, or any map-style dataset.

Each source is a sequence of items with a stable order (so an interrupted pack can resume at the
same position), a human-readable name per item (for the list of skipped files) and a fingerprint
(so a resume only continues a pack of the same input with the same options).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from stave.errors import InputError

# The extensions torchvision's ImageFolder accepts.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# A list file larger than this is almost certainly not a (path, label) list.
MAX_LIST_BYTES = 2 << 30


class Source:
    """A packable sequence: ``get(i) -> (payload, label)`` and ``describe(i) -> str``."""

    classes: list[str] | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, index: int) -> tuple[Any, Any]:
        """The payload (bytes, path, PIL image, array or tensor) and label of item ``index``."""
        raise NotImplementedError

    def describe(self, index: int) -> str:
        """A name for item ``index`` in messages and the skipped list."""
        return f"item {index}"

    def fingerprint(self) -> str:
        """A digest that changes when the items or their order change."""
        raise NotImplementedError


class FileListSource(Source):
    """Files on disk with integer labels (from a folder tree or a list file)."""

    def __init__(self, entries: Sequence[tuple[Path, int]], classes: list[str] | None, origin: Path) -> None:
        self.entries = list(entries)
        self.classes = classes
        self.origin = origin

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, index: int) -> tuple[Any, Any]:
        path, label = self.entries[index]
        return path, label

    def describe(self, index: int) -> str:
        return str(self.entries[index][0])

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for path, label in self.entries:
            try:
                stat = path.stat()
                stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
            except OSError:
                stamp = "missing"
            digest.update(f"{path}\0{label}\0{stamp}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()


class DatasetSource(Source):
    """Any map-style dataset whose items are ``(image or bytes, label)``."""

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise InputError(f"{type(dataset).__name__} is not a map-style dataset (needs __len__ and __getitem__)")
        self.dataset = dataset
        classes = getattr(dataset, "classes", None)
        self.classes = [str(c) for c in classes] if isinstance(classes, (list, tuple)) else None

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, index: int) -> tuple[Any, Any]:
        item = self.dataset[index]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise InputError(f"item {index} of {type(self.dataset).__name__} is not an (image, label) pair")
        return item[0], item[1]

    def fingerprint(self) -> str:
        # A dataset object has no stable identity across runs; its type, length and root (when it
        # has one) are the best available, so a resume assumes the same items in the same order.
        root = getattr(self.dataset, "root", "")
        return hashlib.sha256(f"{type(self.dataset).__qualname__}\0{len(self.dataset)}\0{root}".encode()).hexdigest()


def from_folder(root: Path) -> FileListSource:
    """An ImageFolder tree: one sub-folder per class (sorted names -> labels 0..), images inside."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise InputError(f"{root}: no class sub-folders; expected ROOT/<class>/<image> (torchvision ImageFolder layout)")
    entries: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        for dirpath, dirnames, filenames in os.walk(root / name, followlinks=True):
            dirnames.sort()
            for filename in sorted(filenames):
                if filename.lower().endswith(IMAGE_EXTENSIONS) and not filename.startswith("."):
                    entries.append((Path(dirpath) / filename, label))
    if not entries:
        raise InputError(f"{root}: no images with extensions {', '.join(IMAGE_EXTENSIONS)} in the class folders")
    return FileListSource(entries, classes, root)


def _labels_to_ints(raw: list[tuple[Path, str]], origin: Path) -> tuple[list[tuple[Path, int]], list[str] | None]:
    try:
        return [(p, int(label)) for p, label in raw], None
    except ValueError:
        # Class names: map sorted names to 0.. as ImageFolder does.
        names = sorted({label for _p, label in raw})
        lookup = {name: i for i, name in enumerate(names)}
        return [(p, lookup[label]) for p, label in raw], names


def from_list(path: Path) -> FileListSource:
    """A CSV (``path,label`` rows; a header row is allowed) or JSONL (``{"path":..., "label":...}``) list.

    Relative paths are relative to the list file's folder. Labels are integers or class names.
    """
    if path.stat().st_size > MAX_LIST_BYTES:
        raise InputError(f"{path}: list file larger than {MAX_LIST_BYTES} bytes")
    base = path.parent
    raw: list[tuple[Path, str]] = []
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            if path.suffix.lower() == ".jsonl":
                for lineno, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{path}:{lineno}: not JSON ({exc.msg})") from exc
                    if not isinstance(obj, dict) or "path" not in obj or "label" not in obj:
                        raise InputError(f"{path}:{lineno}: expected an object with 'path' and 'label'")
                    raw.append((base / str(obj["path"]), str(obj["label"])))
            else:
                for lineno, row in enumerate(csv.reader(handle), 1):
                    if not row or not any(cell.strip() for cell in row):
                        continue
                    if len(row) < 2:
                        raise InputError(f"{path}:{lineno}: expected 'path,label', got {len(row)} column(s)")
                    if lineno == 1 and row[0].strip().lower() in ("path", "file", "filename", "image"):
                        continue
                    raw.append((base / row[0].strip(), row[1].strip()))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    if not raw:
        raise InputError(f"{path}: the list is empty")
    entries, classes = _labels_to_ints(raw, path)
    return FileListSource(entries, classes, path)


def open_source(src: Any) -> Source:
    """A :class:`Source` for a folder, a ``.csv``/``.jsonl`` list, or a map-style dataset object."""
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if path.is_dir():
            return from_folder(path)
        if path.is_file() and path.suffix.lower() in (".csv", ".jsonl"):
            return from_list(path)
        if path.exists():
            raise InputError(f"{path}: give a folder of class sub-folders or a .csv/.jsonl list of (path, label)")
        raise InputError(f"{path}: no such file or directory")
    if isinstance(src, Source):
        return src
    return DatasetSource(src)
