# pytorch/examples time_sequence_prediction style: LSTMCell unrolled by hand, LBFGS with a closure
import numpy as np, torch, torch.nn as nn, torch.optim as optim
np.random.seed(2); T, L, N = 20, 1000, 100
x = np.empty((N, L), 'int64'); x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype('float64')
class Sequence(nn.Module):
    def __init__(self):
        super().__init__(); self.lstm1 = nn.LSTMCell(1, 51); self.lstm2 = nn.LSTMCell(51, 51); self.linear = nn.Linear(51, 1)
    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double); c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double); c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t)); h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2)); outputs += [self.linear(h_t2)]
        return torch.cat(outputs, dim=1)
input = torch.from_numpy(data[3:, :-1]); target = torch.from_numpy(data[3:, 1:])
seq = Sequence(); seq.double(); criterion = nn.MSELoss()
optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=4)
for i in range(8):
    def closure():
        optimizer.zero_grad(); out = seq(input); loss = criterion(out, target); loss.backward(); return loss
    optimizer.step(closure)
    print('STEP', i, closure().item())
