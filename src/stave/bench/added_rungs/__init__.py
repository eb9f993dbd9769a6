"""Ladder rungs added one file each.

A module in this package is the whole of a new rung: it registers the training-step setting the
rung changes (a :class:`~stave.train.switches.Switch`: default, whether it alters the arithmetic,
how ``build_step`` applies it, the code it prints) and the rung's plan with
:func:`stave.bench.rungs.rung` (name, title, where it goes in the ladder). The ladder imports every
module here before it climbs (:func:`load_all`); nothing else needs to change. Template::

    from stave.bench.rungs import Plan, rung
    from stave.train.switches import Switch, register_switch

    register_switch(Switch("my_setting", default=False, numeric=True,
                           apply=lambda model, device, on: ..., code=lambda on: ["..."]))

    @rung("my_setting", "what it does", before="input_again")
    def plan_my_setting(ctx, current):
        return Plan("single", (("my setting", {"my_setting": True}),))
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> list[str]:
    """Import every rung module of this package (each registers itself); their names."""
    names = []
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
        names.append(info.name)
    return names
