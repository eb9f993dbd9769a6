import os, time, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import TensorDataset, DataLoader, BatchSampler, RandomSampler
torch.manual_seed(1)
B = int(os.environ.get("B", 128)); FUSED = os.environ.get("FUSED") == "1"; BIDX = os.environ.get("BIDX") == "1"
X = torch.rand(12800, 1, 28, 28); ds = TensorDataset(X, torch.zeros(12800))
if BIDX: train_loader = DataLoader(ds, batch_size=None, sampler=BatchSampler(RandomSampler(ds), batch_size=B, drop_last=False))
else: train_loader = DataLoader(ds, batch_size=B, shuffle=True)
class VAE(nn.Module):
    def __init__(self):
        super().__init__(); self.fc1 = nn.Linear(784, 400); self.fc21 = nn.Linear(400, 20); self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400); self.fc4 = nn.Linear(400, 784)
    def forward(self, x):
        h1 = F.relu(self.fc1(x.view(-1, 784))); mu, logvar = self.fc21(h1), self.fc22(h1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar); return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar
model = VAE(); optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=FUSED or None)
n = 0; t0 = None
for epoch in range(4):
    for data, _ in train_loader:
        if epoch == 1 and t0 is None: t0 = time.perf_counter(); n = 0
        optimizer.zero_grad(); r, mu, logvar = model(data)
        loss = F.binary_cross_entropy(r, data.view(-1, 784), reduction='sum') - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss.backward(); loss.item(); optimizer.step(); n += data.shape[0]
print("TIME", (time.perf_counter() - t0) / n)
