"""expect: healthy. Greedy decoding of 4 prompts, 200 new tokens each, with a per-layer KV cache
grown by torch.cat at every token and dropped after each sequence (memory rises within a sequence
and falls after it). A few seconds; no markers, no history."""
import torch
from torch import nn

torch.manual_seed(0)
d, layers, heads, vocab = 1024, 8, 16, 32000
emb = nn.Embedding(vocab, d).cuda().half()
qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers)).cuda().half()
out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers)).cuda().half()
lm = nn.Linear(d, vocab).cuda().half()


@torch.no_grad()
def generate(prompt, new_tokens):
    cache = [None] * layers
    tok = prompt
    for _ in range(new_tokens):
        x = emb(tok)
        for i in range(layers):
            q, k, v = qkv[i](x).chunk(3, -1)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], 1)
                v = torch.cat([cache[i][1], v], 1)
            cache[i] = (k, v)
            att = torch.softmax(q @ k.transpose(1, 2) / d ** 0.5, -1)
            x = x + out[i](att @ v)
        tok = lm(x[:, -1:]).argmax(-1)
    return tok


for _ in range(4):
    prompt = torch.randint(0, vocab, (16, 512), device="cuda")
    generate(prompt, 200)
torch.cuda.synchronize()
print("done")
