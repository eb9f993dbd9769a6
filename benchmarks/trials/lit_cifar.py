# Lightning CIFAR-style: a small CNN, torchvision augmentation on uint8 HWC images in the Dataset, 2 workers
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import lightning as L
import torchvision.transforms as T
from torch.utils.data import Dataset, DataLoader
class Cifarish(Dataset):
    def __init__(self, n=5000):
        self.x = np.random.default_rng(0).integers(0, 255, (n, 32, 32, 3), dtype=np.uint8); self.y = np.arange(n) % 10
        self.t = T.Compose([T.ToPILImage(), T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                            T.Normalize((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))])
    def __len__(self): return len(self.x)
    def __getitem__(self, i): return self.t(self.x[i]), int(self.y[i])
class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1); self.c2 = nn.Conv2d(32, 64, 3, padding=1); self.c3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128 * 4 * 4, 10)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2); x = F.max_pool2d(F.relu(self.c2(x)), 2); x = F.max_pool2d(F.relu(self.c3(x)), 2)
        return self.fc(x.flatten(1))
    def training_step(self, batch, idx):
        x, y = batch; loss = F.cross_entropy(self(x), y); self.log("train_loss", loss); return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
if __name__ == "__main__":
    dl = DataLoader(Cifarish(), batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)
    L.Trainer(max_epochs=1, limit_train_batches=70, accelerator="cpu", logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False).fit(Net(), dl)
