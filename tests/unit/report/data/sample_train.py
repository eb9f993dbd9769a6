"""A training script's source for the report tests: the hot-lines table shows these lines' code.

It is never run; the synthetic stack samples point at the lines marked ``# hot:<name>``.
"""

import torch


def main(model, loader, optimizer, criterion):
    model.train()
    for images, labels in loader:  # hot:fetch
        outputs = model(images)  # hot:forward
        loss = criterion(outputs, labels)  # hot:loss
        optimizer.zero_grad()
        loss.backward()  # hot:backward
        optimizer.step()  # hot:step


if __name__ == "__main__":
    main(torch.nn.Linear(1, 1), [], None, None)  # hot:module
