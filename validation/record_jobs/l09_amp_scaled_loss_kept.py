"""expect: leak. fp16 AMP: the scaled loss (with its graph) is kept in a list for 'debugging'."""
import torch
from _models import cnn, images

model = cnn(width=32)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
debug = []
for step in range(300):
    x, y = images(32, 64)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward(retain_graph=True)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    debug.append(scaled)  # the graph was retained: its saved activations stay
    if torch.cuda.memory_allocated() > 12 << 30:
        break
print("done", step + 1, "steps")
