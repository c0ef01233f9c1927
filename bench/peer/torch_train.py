"""PyTorch peer of `cohort train --model net`: one process, one epoch of Net on
Fashion-MNIST (batch 64, SGD lr 0.01 momentum 0.9, clip_grad_norm 10).
Prints one JSON line: seconds, samples_per_second, test_accuracy, train_loss, peak_rss_mib.

--device cuda[:N] (issue 35): the peer of `cohort train --device cuda`: the model on the GPU, each
batch indexed on the host and copied there (the tutorials' `data.to(device)`), fp32;
"seconds" is the training time with the GPU's work finished (torch.cuda.synchronize), without
the evaluation, as cohort's epoch time; "peak_gpu_mib" is torch.cuda.max_memory_allocated()."""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

import fashion

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--max-steps", type=int, default=0)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--data-dir", default=fashion.DEFAULT_DIR)
p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
a = p.parse_args()
device = torch.device(a.device)
cuda = device.type == "cuda"
if cuda and not torch.cuda.is_available():
    print(f"torch_train: --device {a.device}: torch.cuda.is_available() is False "
          f"(torch {torch.__version__})", file=sys.stderr)
    sys.exit(1)

torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
xtr, ytr = fashion.load("train", a.data_dir)
xte, yte = fashion.load("test", a.data_dir)
model = fashion.Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(a.seed)
start = time.perf_counter()
samples, loss_sum, steps = 0, 0.0, 0
for epoch in range(a.epochs):
    perm = torch.randperm(len(xtr), generator=g)
    for i in range(0, len(xtr), a.batch_size):
        idx = perm[i:i + a.batch_size]
        opt.zero_grad()
        x, y = xtr[idx].to(device), ytr[idx].to(device)
        loss = F.nll_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        samples += len(idx)
        loss_sum += loss.item()
        steps += 1
        if a.max_steps and steps >= a.max_steps:
            break
if cuda:
    torch.cuda.synchronize(device)
seconds = time.perf_counter() - start
acc = fashion.evaluate(model, xte, yte)
print(json.dumps({"seconds": seconds, "samples_per_second": samples / seconds,
                  "test_accuracy": acc, "train_loss": loss_sum / steps,
                  "peak_rss_mib": fashion.peak_rss_mib(), "threads": a.threads,
                  "device": str(device), "gpu": torch.cuda.get_device_name(device) if cuda else "",
                  "peak_gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else 0.0,
                  "steps": steps, "torch": torch.__version__}))
