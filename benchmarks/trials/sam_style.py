# SAM (sharpness-aware minimization) style: two forward/backward passes over each batch, one base optimizer step
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kw):
        super().__init__(params, dict(rho=rho, **kw)); self.base_optimizer = base_optimizer(self.param_groups, **kw)
    @torch.no_grad()
    def first_step(self, zero_grad=False):
        norm = torch.norm(torch.stack([p.grad.norm(2) for g in self.param_groups for p in g["params"] if p.grad is not None]), 2)
        for g in self.param_groups:
            scale = g["rho"] / (norm + 1e-12)
            for p in g["params"]:
                if p.grad is None: continue
                e = p.grad * scale; p.add_(e); self.state[p]["e_w"] = e
        if zero_grad: self.zero_grad()
    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None: continue
                p.sub_(self.state[p]["e_w"])
        self.base_optimizer.step()
        if zero_grad: self.zero_grad()
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
opt = SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
loader = DataLoader(TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,))), batch_size=128, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        F.cross_entropy(model(x), y).backward(); opt.first_step(zero_grad=True)
        F.cross_entropy(model(x), y).backward(); opt.second_step(zero_grad=True)
    print("epoch", epoch)
