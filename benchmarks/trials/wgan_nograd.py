# WGAN-GP style (many public repos): the critic trains n_critic times per generator step on fakes made under no_grad
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
latent, n_critic, lambda_gp = 64, 5, 10.0
data = torch.randn(20000, 256) * 0.5 + 1.0
loader = DataLoader(TensorDataset(data), batch_size=64, shuffle=True, drop_last=True)
G = nn.Sequential(nn.Linear(latent, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
D = nn.Sequential(nn.Linear(256, 512), nn.LeakyReLU(0.2), nn.Linear(512, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
opt_G = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_D = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.0, 0.9))
def gradient_penalty(real, fake):
    a = torch.rand(real.size(0), 1)
    x = (a * real + (1 - a) * fake).requires_grad_(True)
    g = torch.autograd.grad(D(x).sum(), x, create_graph=True)[0]
    return ((g.norm(2, dim=1) - 1) ** 2).mean()
for epoch in range(2):
    for i, (real,) in enumerate(loader):
        with torch.no_grad():
            fake = G(torch.randn(real.size(0), latent))
        d_loss = D(fake).mean() - D(real).mean() + lambda_gp * gradient_penalty(real, fake)
        opt_D.zero_grad(); d_loss.backward(); opt_D.step()
        if i % n_critic == 0:
            g_loss = -D(G(torch.randn(real.size(0), latent))).mean()
            opt_G.zero_grad(); g_loss.backward(); opt_G.step()
        if i % 100 == 0:
            print(f"epoch {epoch} iter {i} d_loss {d_loss.item():.3f} g_loss {g_loss.item():.3f}")
