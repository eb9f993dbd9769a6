# pytorch/examples regression style: fit a polynomial with nn.Linear, hand-written SGD update, no optimizer
import torch, torch.nn.functional as F
POLY_DEGREE = 4
W_target = torch.randn(POLY_DEGREE, 1) * 5; b_target = torch.randn(1) * 5
def make_features(x):
    x = x.unsqueeze(1); return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)
def get_batch(batch_size=32):
    random = torch.randn(batch_size); x = make_features(random); return x, x.mm(W_target) + b_target.item()
fc = torch.nn.Linear(W_target.size(0), 1)
for batch_idx in range(1, 3000):
    batch_x, batch_y = get_batch()
    fc.zero_grad()
    output = F.smooth_l1_loss(fc(batch_x), batch_y); loss = output.item(); output.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    if loss < 1e-3: break
print('Loss: {:.6f} after {} batches'.format(loss, batch_idx))
