"""``seed-resnet18``: seed 002's pipeline, from the same definitions the doctor's demo runs.

Fake CIFAR uint8 arrays through PIL, Resize, ToTensor and Normalize, batch 32, no workers,
ResNet-18, SGD (momentum 0.9, lr 0.001): everything is imported from
``stave_examples.seed_baseline`` (examples/seed_baseline.py). The only addition is the uint8
variant of the dataset the uint8 rung needs: the same Resize, then PILToTensor instead of
ToTensor + Normalize (normalization moves to the device).
"""

from __future__ import annotations

from torch import nn
from torchvision import transforms

from stave.bench.spec import JobSpec

NAME = "seed-resnet18"
DEFAULT_SIZE = 64
# --quick: CIFAR's own 32 px and a small dataset, so a full climb takes tens of seconds on 2 cores.
QUICK_SIZE = 32
QUICK_SAMPLES = 1024
# The seed's dataset size.
SAMPLES = 5000


def build(size: int | None = None, quick: bool = False) -> JobSpec:
    """The workload at ``size`` px (default 64; the seed's original is 224)."""
    from stave_examples import seed_baseline as sb

    side = size or (QUICK_SIZE if quick else DEFAULT_SIZE)
    samples = QUICK_SAMPLES if quick else SAMPLES
    dataset = sb.FakeCIFAR(samples, transform=sb.build_transform(side))
    uint8 = sb.FakeCIFAR(samples, transform=transforms.Compose([transforms.Resize(side), transforms.PILToTensor()]))
    return JobSpec(
        name=NAME,
        model=sb.build_model,
        dataset=dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=sb.build_optimizer,
        batch_size=32,
        num_workers=0,
        set_to_none=True,
        uint8_dataset=uint8,
        mean=sb.CIFAR_MEAN,
        std=sb.CIFAR_STD,
        description=f"ResNet-18, fake CIFAR through PIL at {side} px, batch 32, SGD (seed 002)",
    )
