# pytorch/examples dcgan style: two optimizers per iteration, DataLoader with workers and transforms (synthetic images)
import torch, torch.nn as nn, torch.optim as optim, numpy as np
import torchvision.transforms as transforms
from torch.utils.data import Dataset, DataLoader
from PIL import Image
nz, ngf, ndf, nc, image_size = 100, 32, 32, 3, 32
class FakeImages(Dataset):
    def __init__(self, n, transform):
        self.n = n; self.transform = transform
    def __len__(self): return self.n
    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8))
        return self.transform(img), 0
dataset = FakeImages(6400, transforms.Compose([transforms.Resize(image_size), transforms.CenterCrop(image_size),
                                               transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)]))
def weights_init(m):
    if 'Conv' in m.__class__.__name__: nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif 'BatchNorm' in m.__class__.__name__: nn.init.normal_(m.weight.data, 1.0, 0.02); nn.init.constant_(m.bias.data, 0)
netG = nn.Sequential(nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
                     nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
                     nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
                     nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())
netD = nn.Sequential(nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
                     nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
                     nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
                     nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid(), nn.Flatten(0))
netG.apply(weights_init); netD.apply(weights_init)
criterion = nn.BCELoss()
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
if __name__ == "__main__":
    dataloader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)
    for i, data in enumerate(dataloader):
        netD.zero_grad(); real = data[0]; b = real.size(0)
        label = torch.full((b,), 1.0); output = netD(real); errD_real = criterion(output, label); errD_real.backward()
        noise = torch.randn(b, nz, 1, 1); fake = netG(noise); label.fill_(0.0)
        output = netD(fake.detach()); errD_fake = criterion(output, label); errD_fake.backward(); optimizerD.step()
        netG.zero_grad(); label.fill_(1.0); output = netD(fake); errG = criterion(output, label); errG.backward(); optimizerG.step()
        if i % 20 == 0:
            print(f'[{i}/{len(dataloader)}] Loss_D: {(errD_real + errD_fake).item():.4f} Loss_G: {errG.item():.4f}')
