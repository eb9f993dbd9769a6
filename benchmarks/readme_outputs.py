"""Rerun the commands whose output README.md shows, and diff (or rewrite) the pasted output.

Each pasted output in README.md sits in a fenced block right after a marker comment:

    <!-- output: stave demo | sections: stave doctor, Step time, Findings -->
    ```
    ...what the command printed...
    ```

The command runs from the repository root with this repository's stave (``python -m stave`` of the
interpreter running this script, ``src/`` first on the path), a 100-column terminal and no colour.
``sections:`` keeps only the report sections whose rule starts with one of the names (a line
"... (sections left out)" marks each cut); ``lines: N`` keeps the first N lines. Paths of this machine
(the repository root, the home directory) are written relative or as ``~``, so the README names no
machine path.

    python benchmarks/readme_outputs.py           # print a diff per block; exit 1 if any differ
    python benchmarks/readme_outputs.py --write   # paste the fresh outputs into README.md
    python benchmarks/readme_outputs.py --only "stave trace"   # just the blocks of one command

Outputs with timings differ between any two runs; the diff is for a person to read, ``--write`` is the
refresh. Run it after the code changes, on the machine whose numbers the README describes.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 100
MARKER = re.compile(r"^<!-- output: (?P<spec>.+?) -->\n```[a-z]*\n(?P<body>.*?)^```$", re.M | re.S)
# A rich section rule: "Title ─────" (left-aligned title) or "──── Title ────".
RULE = re.compile(r"^(?:─+ )?(?P<title>[^─\s][^─]*?) ─{3,}\s*$")


def parse_spec(spec: str) -> tuple[str, list[str], int | None]:
    """The command, the section names to keep (empty: all) and the line limit of a marker."""
    command, *options = [part.strip() for part in spec.split(" | ")]
    sections: list[str] = []
    lines = None
    for option in options:
        name, _, value = option.partition(":")
        if name.strip() == "sections":
            sections = [s.strip() for s in value.split(",") if s.strip()]
        elif name.strip() == "lines":
            lines = int(value)
        else:
            raise SystemExit(f"readme_outputs: unknown option {option!r} in marker {spec!r}")
    return command, sections, lines


def run(command: str) -> str:
    """The command's stdout, run the way the README shows it (``stave`` is this repository's)."""
    if command.startswith("stave "):
        command = f"{sys.executable} -m stave {command[len('stave '):]}"
    env = dict(os.environ, COLUMNS=str(WIDTH), NO_COLOR="1", TERM="dumb",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1: findings at or above --fail-on, still a report
        raise SystemExit(f"readme_outputs: {command!r} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def _examples_dir() -> str | None:
    """Where ``stave_examples`` (the repository's examples/) is imported from, if importable."""
    try:
        import stave_examples
    except ImportError:
        return None
    return os.path.dirname(os.path.abspath(stave_examples.__file__))


def scrub(text: str) -> str:
    """No machine paths: the repository root becomes relative, the examples' directory (wherever the
    installed stave_examples lies) ``examples``, the home directory ``~``."""
    examples = _examples_dir()
    if examples and examples != str(ROOT / "examples"):
        text = text.replace(examples, "examples")
    text = text.replace(f"{ROOT}{os.sep}", "").replace(str(ROOT), ".")
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        text = text.replace(home, "~")
    return "\n".join(line.rstrip() for line in text.splitlines())


def keep_sections(text: str, names: list[str]) -> str:
    """Only the sections whose rule title starts with one of ``names``; a cut is marked once. Lines
    before the first rule (what the user's script printed itself) are left out too."""
    out: list[str] = []
    keeping: bool | None = None  # before the first rule: left out
    for line in text.splitlines():
        match = RULE.match(line)
        if match:
            now = any(match.group("title").startswith(name) for name in names)
            if keeping and not now:
                out.append("... (sections left out)")
            keeping = now
        if keeping:
            out.append(line)
    return "\n".join(out).strip("\n")


def fresh_output(spec: str) -> str:
    """What the marker's command prints now, cut as the marker says."""
    command, sections, lines = parse_spec(spec)
    text = scrub(run(command))
    if sections:
        text = keep_sections(text, sections)
    if lines is not None:
        text = "\n".join(text.splitlines()[:lines])
    return text.strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Diff or rewrite every marked block; returns 1 when a diffed block differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="paste the fresh outputs into README.md")
    parser.add_argument("--only", metavar="TEXT", help="only the blocks whose command contains TEXT")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    differs = False
    pieces, last = [], 0
    for match in MARKER.finditer(readme):
        spec, old = match.group("spec"), match.group("body")
        if args.only and args.only not in parse_spec(spec)[0]:
            continue
        print(f"readme_outputs: running {spec}", file=sys.stderr)
        new = fresh_output(spec)
        pieces += [readme[last:match.start("body")], new]
        last = match.end("body")
        if new != old:
            differs = True
            if not args.write:
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                           f"README.md: {spec}", "now"))
    if args.write:
        updated = "".join(pieces) + readme[last:]
        tmp = README.with_suffix(".md.tmp")
        tmp.write_text(updated, encoding="utf-8")
        tmp.replace(README)  # atomic
        print(f"readme_outputs: README.md {'updated' if updated != readme else 'unchanged'}", file=sys.stderr)
        return 0
    return 1 if differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
