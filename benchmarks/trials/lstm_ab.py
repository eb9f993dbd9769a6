import os, time, numpy as np, torch, torch.nn as nn
from torch.utils.data import Dataset, DataLoader
B = int(os.environ.get("B", 64)); LR = 1e-3 * (B / 64)
series = np.sin(np.arange(60000) * 0.02).astype(np.float32) + 0.1 * np.random.default_rng(0).standard_normal(60000).astype(np.float32)
class Windows(Dataset):
    def __init__(self, s, w=48): self.s, self.w = s, w
    def __len__(self): return len(self.s) - self.w - 1
    def __getitem__(self, i):
        x = self.s[i:i + self.w]; y = self.s[i + self.w]
        return torch.from_numpy(x).unsqueeze(-1), torch.tensor([y])
class Forecaster(nn.Module):
    def __init__(self):
        super().__init__(); self.lstm = nn.LSTM(1, 64, num_layers=2, batch_first=True); self.fc = nn.Linear(64, 1)
    def forward(self, x): out, _ = self.lstm(x); return self.fc(out[:, -1])
model = Forecaster(); opt = torch.optim.Adam(model.parameters(), lr=LR); crit = nn.MSELoss()
loader = DataLoader(Windows(series), batch_size=B, shuffle=True)
n = 0; t0 = None; steps = 0
for i, (x, y) in enumerate(loader):
    if i == 5: t0 = time.perf_counter(); n = 0
    opt.zero_grad(); loss = crit(model(x), y); loss.backward(); opt.step(); n += x.shape[0]
    if t0 and time.perf_counter() - t0 > 6: break
print("TIME", (time.perf_counter() - t0) / n)
