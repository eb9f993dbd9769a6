# Time-series forecasting tutorial style: sliding windows from a numpy series, LSTM(batch_first=True), MSE, Adam
import numpy as np, torch, torch.nn as nn
from torch.utils.data import Dataset, DataLoader
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
model = Forecaster(); opt = torch.optim.Adam(model.parameters(), lr=1e-3); crit = nn.MSELoss()
loader = DataLoader(Windows(series), batch_size=64, shuffle=True)
for i, (x, y) in enumerate(loader):
    opt.zero_grad(); loss = crit(model(x), y); loss.backward(); opt.step()
    if i % 50 == 0: print(i, loss.item())
    if i == 300: break
