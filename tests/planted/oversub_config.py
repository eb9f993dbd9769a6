"""Planted bottleneck: a config file's ``num_threads: 32`` applied to a transformer encoder (expect THREAD_OVERSUBSCRIPTION).

The run reads its settings from a config dict (as a YAML file would give them), including
``num_threads: 32`` for the intra-op pool and ``interop_threads: 8``, values chosen for a large
server. On a small machine each of the encoder's many small ops is cut into 32 chunks.

``--fixed``: the thread settings removed from the config (torch's defaults).
"""

from __future__ import annotations

import torch
from _timing import StepTimer, cpu_autocast, planted_args
from torch import nn

CONFIG = {"d_model": 256, "nhead": 4, "layers": 2, "seq_len": 64, "batch_size": 16, "lr": 3e-4,
          "num_threads": 32, "interop_threads": 8}


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], d_model=CONFIG["d_model"], batch_size=CONFIG["batch_size"])
    cfg = dict(CONFIG, d_model=args.d_model, batch_size=args.batch_size)
    if args.fixed:
        cfg.pop("num_threads")
        cfg.pop("interop_threads")
    if "num_threads" in cfg:
        torch.set_num_threads(cfg["num_threads"])
        torch.set_num_interop_threads(cfg["interop_threads"])
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(cfg["d_model"], cfg["nhead"], 4 * cfg["d_model"], batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, cfg["layers"]), nn.Linear(cfg["d_model"], 10))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(0)
    x_all = torch.randn(512, cfg["seq_len"], cfg["d_model"], generator=gen)
    y_all = torch.randint(0, 10, (512, cfg["seq_len"]), generator=gen)
    timer = StepTimer(args.steps, args.warmup)
    i = 0
    while not timer.done:
        idx = torch.randint(0, 512, (cfg["batch_size"],), generator=gen)
        x, y = x_all[idx], y_all[idx]
        with cpu_autocast():
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 10), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.step(cfg["batch_size"])
        i += 1
    timer.report()


if __name__ == "__main__":
    main()
