# pytorch/examples word_language_model style: batchify, get_batch, LSTM, repackage_hidden, manual SGD (no optimizer)
import math, time, torch, torch.nn as nn
torch.manual_seed(1111)
ntokens, emsize, nhid, nlayers, bptt, lr, clip = 2000, 200, 200, 2, 35, 20.0, 0.25
corpus = torch.randint(0, ntokens, (120_000,))
def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()
train_data = batchify(corpus, 20)
class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2); self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, nlayers, dropout=0.2); self.decoder = nn.Linear(nhid, ntokens)
    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input)); output, hidden = self.rnn(emb, hidden)
        output = self.drop(output); decoded = self.decoder(output).view(-1, ntokens)
        return nn.functional.log_softmax(decoded, dim=1), hidden
    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(nlayers, bsz, nhid), w.new_zeros(nlayers, bsz, nhid))
def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)
def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)
model = RNNModel(); criterion = nn.NLLLoss()
def train():
    model.train(); total_loss = 0.; start_time = time.time(); hidden = model.init_hidden(20)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        if batch >= 120: break
        data, targets = get_batch(train_data, i)
        model.zero_grad(); hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden); loss = criterion(output, targets); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        if batch % 40 == 0 and batch > 0:
            cur_loss = total_loss / 40; elapsed = time.time() - start_time
            print(f'| {batch:5d} batches | ms/batch {elapsed * 1000 / 40:5.2f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}')
            total_loss = 0; start_time = time.time()
train()
