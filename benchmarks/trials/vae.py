# pytorch/examples vae style: MNIST-sized synthetic data in a TensorDataset, Adam, healthy
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import TensorDataset, DataLoader
torch.manual_seed(1)
X = torch.rand(12800, 1, 28, 28)
train_loader = DataLoader(TensorDataset(X, torch.zeros(12800)), batch_size=128, shuffle=True)
class VAE(nn.Module):
    def __init__(self):
        super().__init__(); self.fc1 = nn.Linear(784, 400); self.fc21 = nn.Linear(400, 20); self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400); self.fc4 = nn.Linear(400, 784)
    def encode(self, x): h1 = F.relu(self.fc1(x)); return self.fc21(h1), self.fc22(h1)
    def reparameterize(self, mu, logvar): std = torch.exp(0.5 * logvar); return mu + torch.randn_like(std) * std
    def decode(self, z): return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))
    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784)); z = self.reparameterize(mu, logvar); return self.decode(z), mu, logvar
model = VAE(); optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    return BCE - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
for epoch in range(1, 3):
    model.train(); train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        optimizer.zero_grad(); recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar); loss.backward(); train_loss += loss.item(); optimizer.step()
        if batch_idx % 50 == 0:
            print(f'Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item() / len(data):.6f}')
    print(f'====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}')
