"""Writing a packed dataset: ``stave pack SRC DST`` and :func:`pack`.

Items are read and checked in a thread pool (decode and encode release the GIL), then written in
source order by one writer into shards of about ``shard_bytes`` each. A shard is written to
``shard-NNNNN.stave.partial`` and renamed when complete; after each rename the pack state
(``.stave-pack-state.json``: the input's fingerprint, the options, the finished shards) is saved
atomically. ``manifest.json`` is written last, so a dataset without it is never mistaken for a
complete one. Rerunning the same pack resumes after the last finished shard; a different input or
different options start over cleanly.

JPEG input keeps its DCT coefficients when it decodes cleanly and fits ``max_side``: every decoded
pixel stays what it was. By default its entropy coding is redone losslessly with restart markers
every few MCUs (:func:`restart_coded`), which lets the loader decode only the part of the image
under a crop box; ``restart_markers=False`` (``stave pack --keep-bytes``) stores the bytes as given.
Other formats, CMYK or damaged-but-readable JPEGs and oversized images are decoded (Pillow /
libjpeg-turbo), downscaled with an antialiasing filter and re-encoded at ``quality`` (4:2:0), then
given the same restart markers. ``raw=True`` stores decoded uint8 pixels instead (small images: no
decode at load time at all).
"""

from __future__ import annotations

import collections
import concurrent.futures
import io
import json
import logging
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from stave import __version__
from stave.data import format as fmt
from stave.data.decode import MAX_PIXELS, decode_full, get_backend
from stave.data.jpeg import is_jpeg, read_jpeg_info
from stave.data.native import native_module
from stave.data.sources import open_source
from stave.device import usable_cores
from stave.errors import FormatError, InputError, OutputError
from stave.files import atomic_write_json

log = logging.getLogger(__name__)

STATE_NAME = ".stave-pack-state.json"
PARTIAL_SUFFIX = ".partial"
# 256 MiB shards: small enough that many nodes can each take whole shards of ImageNet (~550
# shards), large enough that the per-shard header and file handle cost nothing.
DEFAULT_SHARD_BYTES = 256 << 20
DEFAULT_QUALITY = 90
# Items in flight per worker: enough to hide a slow file, small enough to bound memory.
_IN_FLIGHT_PER_WORKER = 8
# The downscaling filter used once at pack time (quality matters more than speed here).
_PACK_RESAMPLE = Image.Resampling.LANCZOS
# Restart interval width: a crop's decode rounds out to whole intervals, so narrower wastes less decode
# at the edges; but each marker costs ~4 bytes and makes libjpeg-turbo leave its fast Huffman path for
# the rest of the interval. 32 px (2 MCUs at 4:2:0) decoded random crops fastest on the benchmark's
# photos (32, 64, 128 px timed; 16 px grows files by 2.7%) and the optimized Huffman tables pay for the
# markers (+0.5% size).
RESTART_INTERVAL_PX = 32
# A transcode that grew the file by more than this is not stored (it never did on real photos).
_MAX_RESTART_GROWTH = 1.1


@dataclass(frozen=True)
class PackOptions:
    """What shapes the output; a resume requires the same options."""

    max_side: int | None = None
    quality: int = DEFAULT_QUALITY
    raw: bool = False
    shard_bytes: int = DEFAULT_SHARD_BYTES
    restart_markers: bool = True

    def __post_init__(self) -> None:
        if self.max_side is not None and not 1 <= self.max_side <= fmt.MAX_SIDE_PX:
            raise InputError(f"max_side must be in 1..{fmt.MAX_SIDE_PX}, got {self.max_side}")
        if not 1 <= self.quality <= 100:
            raise InputError(f"quality must be in 1..100, got {self.quality}")
        if self.shard_bytes < 1 << 16:
            raise InputError(f"shard size must be at least 64 KiB, got {self.shard_bytes} bytes")


@dataclass
class PackResult:
    """What a pack wrote."""

    path: Path
    num_samples: int
    num_shards: int
    data_bytes: int
    kept_jpeg: int
    reencoded: int
    skipped: list[dict[str, str]] = field(default_factory=list)
    resumed_shards: int = 0
    # JPEGs (kept or re-encoded) stored with restart markers, a lossless re-coding.
    restart_coded: int = 0


@dataclass(frozen=True)
class _Encoded:
    encoding: int
    payload: bytes
    width: int
    height: int
    channels: int
    label: int
    kept: bool
    restart_coded: bool = False


def _as_label(value: Any) -> int:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"label {value!r} is not an integer")
    return int(value)


def _pixels_of(payload: Any, name: str) -> np.ndarray:
    """Decode any supported payload to HxWxC (C = 1 or 3) uint8 pixels."""
    if isinstance(payload, Image.Image):
        image = payload
        if image.size[0] * image.size[1] > MAX_PIXELS:
            raise FormatError(f"{name}: {image.size} image exceeds the pixel limit")
        return np.asarray(image.convert("L" if image.mode in ("L", "1", "I;16") else "RGB"))
    if hasattr(payload, "numpy") and hasattr(payload, "dim"):  # a torch tensor
        payload = payload.detach().cpu().numpy()
        if payload.ndim == 3 and payload.shape[0] in (1, 3) and payload.shape[2] not in (1, 3):
            payload = payload.transpose(1, 2, 0)
    if isinstance(payload, np.ndarray):
        if payload.dtype != np.uint8:
            raise FormatError(f"{name}: array of dtype {payload.dtype}; pack takes uint8 pixels")
        if payload.ndim == 2:
            payload = payload[:, :, None]
        if payload.ndim != 3 or payload.shape[2] not in (1, 3, 4):
            raise FormatError(f"{name}: array of shape {payload.shape}; expected HxW, HxWx1, HxWx3 or HxWx4")
        return np.ascontiguousarray(payload[:, :, :3])
    raise FormatError(f"{name}: cannot pack a {type(payload).__name__}; give bytes, a path, a PIL image or a uint8 array")


def _read_bytes(payload: Any, name: str) -> bytes | None:
    if isinstance(payload, (str, os.PathLike)):
        try:
            return Path(payload).read_bytes()
        except OSError as exc:
            raise FormatError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    return None


def _downscale(pixels: np.ndarray, max_side: int | None) -> np.ndarray:
    height, width = pixels.shape[:2]
    if max_side is None or max(width, height) <= max_side:
        return pixels
    factor = max_side / max(width, height)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    mode_pixels = pixels[:, :, 0] if pixels.shape[2] == 1 else pixels
    out = np.asarray(Image.fromarray(mode_pixels).resize(size, _PACK_RESAMPLE))
    return out[:, :, None] if out.ndim == 2 else out


def _encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    try:
        import simplejpeg
    except ImportError:
        buffer = io.BytesIO()
        gray = pixels.shape[2] == 1
        Image.fromarray(pixels[:, :, 0] if gray else pixels).save(buffer, "JPEG", quality=quality, subsampling="4:2:0")
        return buffer.getvalue()
    if pixels.shape[2] == 1:
        return simplejpeg.encode_jpeg(np.ascontiguousarray(pixels), quality=quality, colorspace="GRAY", colorsubsampling="Gray")
    return simplejpeg.encode_jpeg(np.ascontiguousarray(pixels), quality=quality, colorspace="RGB", colorsubsampling="420")


def packed_with(dst: str | os.PathLike[str], options: dict[str, Any]) -> bool:
    """True when ``dst`` holds a finished pack whose manifest records ``options`` (e.g. a cache check:
    a pack made by an older stave, or with other options, is packed again rather than reused)."""
    try:
        recorded = json.loads((Path(dst) / fmt.MANIFEST_NAME).read_text()).get("options", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(recorded, dict) and all(recorded.get(key) == value for key, value in options.items())


def restart_coded(data: bytes, name: str = "JPEG") -> bytes:
    """``data`` losslessly re-coded with restart markers (see :mod:`stave.data.native`), or as it was.

    The DCT coefficients are copied, so a decode gives the same pixels. ``data`` comes back unchanged
    when the native module is not built, when libjpeg refuses or warns about the file, or when the
    transcode would grow it by more than 10%.
    """
    native = native_module()
    if native is None:
        return data
    try:
        coded = native.add_restarts(data, RESTART_INTERVAL_PX)
    except ValueError as exc:
        log.debug("%s: kept without restart markers (%s)", name, exc)
        return data
    return coded if len(coded) <= len(data) * _MAX_RESTART_GROWTH else data


def _encode_item(payload: Any, label: Any, name: str, options: PackOptions) -> _Encoded:
    """Check, maybe downscale and re-encode one item (runs in a worker thread)."""
    label_int = _as_label(label)
    data = _read_bytes(payload, name)
    pixels: np.ndarray | None = None
    if data is not None and is_jpeg(data) and not options.raw:
        info = read_jpeg_info(data, name)
        fits = options.max_side is None or max(info.width, info.height) <= options.max_side
        if fits and info.components in (1, 3) and info.precision == 8:
            backend = get_backend()
            try:
                # A full decode is the only proof the entropy-coded data is intact.
                decode_full(data, backend, name)
                stored = restart_coded(data, name) if options.restart_markers else data
                return _Encoded(fmt.ENC_JPEG, stored, info.width, info.height, 3, label_int, True, stored is not data)
            except FormatError as exc:
                log.debug("%s: libjpeg-turbo refused (%s); trying Pillow", name, exc)
    if data is not None:
        pixels = decode_full(data, None, name)  # Pillow: every format, CMYK, lenient JPEG
    else:
        pixels = _pixels_of(payload, name)
    pixels = _downscale(pixels, options.max_side)
    height, width, channels = pixels.shape
    if options.raw:
        return _Encoded(fmt.ENC_RAW, pixels.tobytes(), width, height, channels, label_int, False)
    encoded = _encode_jpeg(pixels, options.quality)
    stored = restart_coded(encoded, name) if options.restart_markers else encoded
    return _Encoded(fmt.ENC_JPEG, stored, width, height, 3, label_int, False, stored is not encoded)


class _ShardWriter:
    """Writes one shard to ``.partial`` and renames it when finished."""

    def __init__(self, root: Path, number: int) -> None:
        self.number = number
        self.final = root / fmt.shard_name(number)
        self.partial = self.final.with_name(self.final.name + PARTIAL_SUFFIX)
        self.handle = open(self.partial, "wb")
        self.handle.write(b"\0" * fmt.HEADER_BYTES)
        self.records: list[tuple[int, int, int, int, int, int, int, int]] = []
        self.data_bytes = 0

    def add(self, item: _Encoded) -> None:
        offset = fmt.HEADER_BYTES + self.data_bytes
        self.handle.write(item.payload)
        self.data_bytes += len(item.payload)
        self.records.append(
            (offset, len(item.payload), fmt.sample_crc32(item.payload), item.label, item.width, item.height, item.encoding, item.channels)
        )

    def finish(self) -> int:
        index = np.zeros(len(self.records), dtype=fmt.RECORD_DTYPE)
        for name, column in zip(
            ("offset", "size", "crc32", "label", "width", "height", "encoding", "channels"), zip(*self.records)
        ):
            index[name] = column
        index_offset = fmt.index_offset_for(self.data_bytes)
        raw_index = index.tobytes()
        self.handle.write(b"\0" * (index_offset - fmt.HEADER_BYTES - self.data_bytes))
        self.handle.write(raw_index)
        header = fmt.ShardHeader(len(self.records), fmt.HEADER_BYTES, self.data_bytes, index_offset, zlib.crc32(raw_index), self.number)
        self.handle.seek(0)
        self.handle.write(fmt.pack_header(header))
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.partial, self.final)
        return header.file_bytes

    def abandon(self) -> None:
        self.handle.close()


def _our_files(root: Path) -> list[Path]:
    return [
        p
        for p in root.iterdir()
        if p.name in (fmt.MANIFEST_NAME, STATE_NAME)
        or (p.name.startswith("shard-") and (p.name.endswith(fmt.SHARD_SUFFIX) or p.name.endswith(PARTIAL_SUFFIX)))
        or (p.name.startswith(".") and p.name.endswith(".tmp"))
    ]


def _prepare_destination(root: Path, fingerprint: str, options: PackOptions, overwrite: bool) -> dict[str, Any]:
    """Create or inspect ``root``; return the state to resume from (empty shards list = fresh start)."""
    fresh = {"fingerprint": fingerprint, "options": asdict(options), "shards": [], "skipped": [], "position": 0}
    if root.exists() and not root.is_dir():
        raise OutputError(f"{root} exists and is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {root}: {exc.strerror or exc}") from exc
    ours = _our_files(root)
    foreign = [p for p in root.iterdir() if p not in ours]
    if foreign:
        raise OutputError(f"{root} holds other files (e.g. {foreign[0].name}); pack into an empty or new directory")
    if (root / fmt.MANIFEST_NAME).exists():
        if not overwrite:
            raise OutputError(f"{root} already holds a packed dataset; pass --overwrite to replace it")
        for path in ours:
            path.unlink()
        return fresh
    state_path = root / STATE_NAME
    state: dict[str, Any] | None = None
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            state = None
    if state and state.get("fingerprint") == fingerprint and state.get("options") == asdict(options) and _shards_intact(root, state):
        for path in root.glob("*" + PARTIAL_SUFFIX):
            path.unlink()
        log.info("resuming the pack in %s after %d finished shard(s)", root, len(state["shards"]))
        return state
    if ours:
        log.info("%s holds an unfinished pack of other input or options; starting over", root)
        for path in ours:
            path.unlink()
    return fresh


def _shards_intact(root: Path, state: dict[str, Any]) -> bool:
    try:
        for entry in state["shards"]:
            path = root / entry["file"]
            with open(path, "rb") as handle:
                header = fmt.parse_header(handle.read(fmt.HEADER_BYTES), os.fstat(handle.fileno()).st_size, str(path))
            if header.num_samples != entry["num_samples"]:
                return False
        return isinstance(state.get("position"), int) and isinstance(state.get("skipped"), list)
    except (OSError, KeyError, TypeError, FormatError):
        return False


def pack(
    dataset: Any,
    dst: str | os.PathLike[str],
    *,
    max_side: int | None = None,
    quality: int = DEFAULT_QUALITY,
    raw: bool = False,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    restart_markers: bool = True,
    workers: int | None = None,
    strict: bool = False,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> PackResult:
    """Pack ``dataset`` into the directory ``dst`` (see docs/format.md).

    ``dataset`` is an ImageFolder directory, a ``.csv``/``.jsonl`` list of (path, label), or any
    map-style dataset of ``(image, label)`` where image is encoded bytes, a path, a PIL image or a
    uint8 array. Unreadable items are skipped and listed in the result and the manifest;
    ``strict=True`` raises on the first. ``progress(done, total)`` is called as items are written.
    ``restart_markers=False`` stores fitting JPEGs byte for byte instead of re-coding them losslessly.
    """
    options = PackOptions(max_side=max_side, quality=quality, raw=raw, shard_bytes=shard_bytes, restart_markers=restart_markers)
    source = open_source(dataset)
    total = len(source)
    if total == 0:
        raise InputError("nothing to pack: the dataset is empty")
    root = Path(dst)
    state = _prepare_destination(root, source.fingerprint(), options, overwrite)
    workers = max(1, workers if workers is not None else usable_cores())
    position = int(state["position"])
    skipped: list[dict[str, str]] = list(state["skipped"])
    shards: list[dict[str, Any]] = list(state["shards"])
    resumed = len(shards)
    counts = collections.Counter()
    writer: _ShardWriter | None = None
    written = sum(s["num_samples"] for s in shards)
    if progress is not None:
        progress(position, total)

    def work(i: int) -> _Encoded | str:
        name = source.describe(i)
        try:
            payload, label = source.get(i)
            return _encode_item(payload, label, name, options)
        except (FormatError, InputError) as exc:
            return str(exc)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            # Pillow and the bindings raise these for damaged files.
            return f"{name}: {type(exc).__name__}: {exc}"

    def save_state(next_position: int) -> None:
        atomic_write_json(
            root / STATE_NAME,
            {"fingerprint": state["fingerprint"], "options": asdict(options), "shards": shards, "skipped": skipped, "position": next_position},
        )

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stave-pack")
    pending: collections.deque[tuple[int, concurrent.futures.Future[_Encoded | str]]] = collections.deque()
    next_submit = position
    try:
        while pending or next_submit < total:
            while next_submit < total and len(pending) < workers * _IN_FLIGHT_PER_WORKER:
                pending.append((next_submit, pool.submit(work, next_submit)))
                next_submit += 1
            i, future = pending.popleft()
            result = future.result()
            if isinstance(result, str):
                if strict:
                    raise InputError(f"unreadable image (--strict): {result}")
                skipped.append({"source": source.describe(i), "reason": result})
            else:
                if writer is not None and writer.records and writer.data_bytes + len(result.payload) > options.shard_bytes:
                    nbytes = writer.finish()
                    shards.append({"file": writer.final.name, "num_samples": len(writer.records), "bytes": nbytes})
                    save_state(i)
                    writer = None
                if writer is None:
                    writer = _ShardWriter(root, len(shards))
                writer.add(result)
                written += 1
                counts["kept" if result.kept else "reencoded"] += 1
                counts["restart_coded"] += result.restart_coded
            if progress is not None:
                progress(i + 1, total)
        if writer is not None and writer.records:
            nbytes = writer.finish()
            shards.append({"file": writer.final.name, "num_samples": len(writer.records), "bytes": nbytes})
            writer = None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if writer is not None:
            writer.abandon()
    if written == 0:
        raise InputError(f"no readable images in the input ({len(skipped)} skipped; first: {skipped[0]['reason'] if skipped else '-'})")
    manifest = {
        "format": fmt.MANIFEST_FORMAT,
        "version": fmt.FORMAT_VERSION,
        "num_samples": written,
        "encoding": "raw" if raw else "jpeg",
        "classes": source.classes,
        "shards": shards,
        "skipped": skipped,
        "options": asdict(options),
        "created_by": f"stave {__version__}",
    }
    atomic_write_json(root / fmt.MANIFEST_NAME, manifest)
    (root / STATE_NAME).unlink(missing_ok=True)
    data_bytes = sum(s["bytes"] for s in shards)
    return PackResult(
        root, written, len(shards), data_bytes, counts["kept"], counts["reencoded"], skipped, resumed, counts["restart_coded"]
    )
