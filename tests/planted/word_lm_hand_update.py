"""Planted control: a word language model updated by hand (expect no finding about the job).

Written like pytorch/examples' ``word_language_model``: the corpus is ``batchify``-ed into columns,
``get_batch`` slices ``bptt`` positions of every column (token ids ``(positions, rows)``: the
LSTM runs sequence-first, its default), the hidden state is carried and detached between batches,
and there is no optimizer: ``model.zero_grad()``, backward, ``clip_grad_norm_``, then
``p.data.add_(p.grad, alpha=-lr)`` for each parameter. The doctor has to count its steps at the
``zero_grad()`` that follows each backward, read 20 rows of 35 tokens from ``(35, 20)`` ids, and
name nothing: the per-parameter update loop touches eight tensors. ``--fixed`` changes nothing.
"""

from __future__ import annotations

import torch
from _timing import StepTimer, planted_args
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntokens: int, emsize: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        self.ntokens = ntokens
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, nlayers, dropout=0.2)
        self.decoder = nn.Linear(nhid, ntokens)

    def forward(self, input: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntokens)
        return nn.functional.log_softmax(decoded, dim=1), hidden


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def main() -> None:
    args = planted_args(__doc__.splitlines()[0], steps=60, batch_size=20, bptt=35, emsize=200, nhid=200)
    torch.manual_seed(1111)
    ntokens, lr, clip = 2000, 20.0, 0.25
    corpus = torch.randint(0, ntokens, (200_000,), generator=torch.Generator().manual_seed(0))
    train_data = batchify(corpus, args.batch_size)
    model = RNNModel(ntokens, args.emsize, args.nhid, 2)
    criterion = nn.NLLLoss()
    weight = next(model.parameters())
    hidden = (weight.new_zeros(2, args.batch_size, args.nhid), weight.new_zeros(2, args.batch_size, args.nhid))
    timer = StepTimer(args.steps, args.warmup)
    i = 0
    while not timer.done:
        if i + 1 + args.bptt >= train_data.size(0):
            i = 0
        data, targets = train_data[i:i + args.bptt], train_data[i + 1:i + 1 + args.bptt].reshape(-1)
        i += args.bptt
        model.zero_grad()
        hidden = tuple(h.detach() for h in hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        timer.step(args.batch_size)
    timer.report()


if __name__ == "__main__":
    main()
