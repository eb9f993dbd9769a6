"""``stave pack SRC DST``: pack an image folder or list into stave's format; ``--verify DST`` checks one.

Data (the summary) goes to stdout, the progress bar and the list of skipped files to stderr.
"""

from __future__ import annotations

import argparse
import re
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from stave.errors import UsageError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20, "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}
# Skipped files listed on the terminal; the manifest holds all of them.
_SKIPPED_SHOWN = 20


def parse_size(text: str) -> int:
    """``"256MiB"``, ``"1GB"``, ``"65536"`` -> bytes."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 256MiB, 1GB, 65536)")
    return int(float(match.group(1)) * _UNITS[unit])


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``stave pack`` to the CLI."""
    parser = subparsers.add_parser(
        "pack",
        help="pack images into stave's sharded format (fast loading with stave.data.ImageLoader)",
        description=(
            "Pack SRC (an ImageFolder tree of class sub-folders, or a .csv/.jsonl list of path,label) into "
            "the directory DST. JPEGs that fit keep their DCT coefficients (identical pixels), re-coded losslessly "
            "with restart markers so crops decode faster (--keep-bytes: byte for byte); others are re-encoded. "
            "An interrupted pack resumes when rerun with the same arguments. "
            "`stave pack --verify DST` checks every checksum of a packed dataset."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="SRC DST", help="source and destination (only DST with --verify)")
    parser.add_argument("--max-side", type=int, default=None, metavar="N", help="downscale so the longer side is at most N px")
    parser.add_argument("--quality", type=int, default=90, metavar="Q", help="JPEG quality for re-encoded images (default 90)")
    parser.add_argument(
        "--keep-bytes", action="store_true", help="store JPEGs that fit byte for byte (no lossless restart-marker re-coding)"
    )
    parser.add_argument("--raw", action="store_true", help="store decoded uint8 pixels (small images: no decode when loading)")
    parser.add_argument("--workers", type=int, default=None, metavar="N", help="threads reading and checking images (default: all cores)")
    parser.add_argument("--shard-size", type=parse_size, default="256MiB", metavar="SIZE", help="bytes per shard (default 256MiB)")
    parser.add_argument("--strict", action="store_true", help="fail on the first unreadable image instead of skipping it")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing packed dataset in DST")
    parser.add_argument("--verify", action="store_true", help="check the headers, indexes and every sample checksum of DST")
    parser.set_defaults(func=run)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``stave pack``; returns the exit code."""
    from stave.data.dataset import read_manifest, verify
    from stave.data.writer import pack

    err = Console(stderr=True)
    quiet = not err.is_terminal
    if args.verify:
        if len(args.paths) != 1:
            raise UsageError("stave pack --verify takes one argument: the packed dataset directory")
        dst = args.paths[0]
        total = read_manifest(dst).num_samples
        with _progress(err) as bar:
            task = bar.add_task("verifying", total=total)
            report = verify(dst, progress=lambda n: bar.advance(task, n))
        print(f"{dst}: OK, {report.num_samples} samples in {report.num_shards} shard(s), {report.bytes_checked / 1e6:.1f} MB checksummed")
        return 0
    if len(args.paths) != 2:
        raise UsageError("stave pack takes SRC and DST (or --verify DST)")
    src, dst = args.paths
    with _progress(err) as bar:
        task = bar.add_task("packing", total=None)

        def progress(done: int, total: int) -> None:
            if not quiet:
                bar.update(task, completed=done, total=total)

        result = pack(
            src,
            dst,
            max_side=args.max_side,
            quality=args.quality,
            raw=args.raw,
            shard_bytes=args.shard_size,
            restart_markers=not args.keep_bytes,
            workers=args.workers,
            strict=args.strict,
            overwrite=args.overwrite,
            progress=progress,
        )
    for entry in result.skipped[:_SKIPPED_SHOWN]:
        reason = str(entry["reason"]).removeprefix(f"{entry['source']}: ")  # the reason often names the file too
        print(f"stave: skipped {entry['source']}: {reason}", file=sys.stderr)
    if len(result.skipped) > _SKIPPED_SHOWN:
        print(f"stave: ... and {len(result.skipped) - _SKIPPED_SHOWN} more (all listed in {dst}/manifest.json)", file=sys.stderr)
    resumed = f", resumed after {result.resumed_shards} finished shard(s)" if result.resumed_shards else ""
    how = "kept (same pixels)" if result.restart_coded else "kept byte-for-byte"
    coded = f", {result.restart_coded} restart-coded" if result.restart_coded else ""
    print(
        f"packed {result.num_samples} images into {result.path} ({result.num_shards} shard(s), "
        f"{result.data_bytes / 1e6:.1f} MB; {result.kept_jpeg} JPEGs {how}, {result.reencoded} re-encoded{coded}, "
        f"{len(result.skipped)} skipped{resumed})"
    )
    return 0
