"""``stave doctor`` as the CLI runs it, keeping the run's measurements (its RunRecord) as JSON.

The scenario matrix runs the doctor through this with ``--records DIR``: a rule changed later can then
be judged again on the same measurements (``stave.doctor.facade.diagnose([RunRecord.load(path)])``),
which matters where the measurements are dear, a GPU lent for minutes, or a row that takes many.

    python -m benchmarks.record_doctor RECORD.json doctor [doctor options] SCRIPT [script args]
"""

from __future__ import annotations

import json
import sys

from stave.doctor import facade
from stave.files import atomic_write_text


def main(argv: list[str]) -> int:
    """Run the CLI with ``argv[1:]``, writing the record to ``argv[0]`` when the doctor stops."""
    if len(argv) < 2:
        print("usage: python -m benchmarks.record_doctor RECORD.json doctor [options] SCRIPT [args]", file=sys.stderr)
        return 2
    path = argv[0]
    stop = facade.Doctor.stop

    def stop_and_keep(self: facade.Doctor, outcome: object = None):
        record = stop(self, outcome)
        # json's default writes a non-finite float as NaN, which RunRecord.load reads back.
        atomic_write_text(path, json.dumps(record.to_dict()))
        return record

    facade.Doctor.stop = stop_and_keep  # type: ignore[method-assign]
    from stave.cli import main as cli_main

    sys.argv = ["stave", *argv[1:]]
    return cli_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
