"""Built-in rules. Importing this package registers them with the engine.

One module per area; each rule is a pure function with a stable ID, named thresholds (each with
its reason) and a structured :class:`~stave.diagnose.finding.Finding`.
"""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")
