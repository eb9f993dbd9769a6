# WGAN-GP style (many public repos): the critic trains n_critic times per generator step on fakes made under no_grad
import os, time, torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
latent, n_critic, lambda_gp = 64, 5, 10.0
B = int(os.environ.get('B', 64)); FUSED = os.environ.get('FUSED') == '1' or None; LR = 1e-4 * B / 64
data = torch.randn(20000, 256) * 0.5 + 1.0
loader = DataLoader(TensorDataset(data), batch_size=B, shuffle=True, drop_last=True)
G = nn.Sequential(nn.Linear(latent, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
D = nn.Sequential(nn.Linear(256, 512), nn.LeakyReLU(0.2), nn.Linear(512, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
opt_G = torch.optim.Adam(G.parameters(), lr=LR, betas=(0.0, 0.9), fused=FUSED)
opt_D = torch.optim.Adam(D.parameters(), lr=LR, betas=(0.0, 0.9), fused=FUSED)
def gradient_penalty(real, fake):
    a = torch.rand(real.size(0), 1)
    x = (a * real + (1 - a) * fake).requires_grad_(True)
    g = torch.autograd.grad(D(x).sum(), x, create_graph=True)[0]
    return ((g.norm(2, dim=1) - 1) ** 2).mean()
n = 0; t0 = None
for epoch in range(50):
    for i, (real,) in enumerate(loader):
        if epoch == 0 and i == 10: t0 = time.perf_counter(); n = 0
        if t0 and time.perf_counter() - t0 > 8: break
        with torch.no_grad():
            fake = G(torch.randn(real.size(0), latent))
        d_loss = D(fake).mean() - D(real).mean() + lambda_gp * gradient_penalty(real, fake)
        opt_D.zero_grad(); d_loss.backward(); opt_D.step()
        if i % n_critic == 0:
            g_loss = -D(G(torch.randn(real.size(0), latent))).mean()
            opt_G.zero_grad(); g_loss.backward(); opt_G.step()
        n += real.size(0)
    if t0 and time.perf_counter() - t0 > 8: break
print("TIME", (time.perf_counter() - t0) / n)
