# PyTorch peer of bench_text_windows: nanoGPT's get_batch (train.py) on the
# default corpus (Debian's fortunes, read as cohort reads it: the 43 files in
# sorted order, '%' lines made empty, bytes as tokens, first 90 % for
# training), with PyTorch 1.13 and numpy.
#   /usr/bin/python3 torch_get_batch.py DIR BATCH BLOCK STEPS
import os, sys, time
import numpy as np
import torch

root, batch, block, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
names = """art ascii-art computers cookie debian definitions disclaimer drugs education ethnic food
fortunes goedel humorists kids knghtbrd law linux linuxcookie literature love magic medicine
men-women miscellaneous news paradoxum people perl pets platitudes politics pratchett riddles
science songs-poems sports startrek tao translate-me wisdom work zippy""".split()

t0 = time.perf_counter()
text = bytearray()
for n in names:
    with open(os.path.join(root, n), "rb") as f:
        for line in f.read().splitlines(keepends=True):
            text += b"\n" if line in (b"%\n", b"%") else line
data = np.frombuffer(bytes(text), dtype=np.uint8).astype(np.uint16)
train = data[: int(len(data) * 0.9)]
print("torch   load default corpus (%d tokens): %.1f ms" % (len(data), 1e3 * (time.perf_counter() - t0)))

def get_batch():
    # nanoGPT train.py, CPU branch
    ix = torch.randint(len(train) - block, (batch,))
    x = torch.stack([torch.from_numpy((train[i:i + block]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((train[i + 1:i + 1 + block]).astype(np.int64)) for i in ix])
    return x, y

for _ in range(100):
    get_batch()
t0 = time.perf_counter()
for _ in range(steps):
    x, y = get_batch()
s = time.perf_counter() - t0
print("torch   nanoGPT get_batch B %d x T %d: %.2f us/batch, %.0f windows/s (%d batches)"
      % (batch, block, 1e6 * s / steps, steps * batch / s, steps))
