"""A run that really runs out of GPU memory (no cap): ResNet-50 trains at batch 256, then meets a batch
of 1536 images (as when a data pipeline's last or bucketed batch is much larger). Expected verdict:
true_capacity, with the largest live allocations (activations of the big batch) listed.
"""

import torch
import torchvision

import oomdoctor

dev = "cuda"
model = torchvision.models.resnet50().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step, batch in enumerate([256] * 5 + [1536] * 2):
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    oomdoctor.step()
    print(f"step {step} batch {batch}: peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
print("unexpected: no OOM")
