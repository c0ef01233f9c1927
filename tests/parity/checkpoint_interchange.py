"""Checkpoints between cohort and PyTorch: the tutorial's Net (bench/peer/fashion.py)
with weights from a cohort checkpoint, or trained here and saved for `cohort eval`.

  checkpoint_interchange.py eval  MODEL.safetensors          -> "accuracy A"
  checkpoint_interchange.py train OUT.safetensors STEPS SEED -> "accuracy A"

Accuracy is on Fashion-MNIST's 10,000 test images, as `cohort eval` computes it.
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "peer"))
sys.path.insert(0, HERE)
from fashion import Net, evaluate, load  # noqa: E402
from torch_parity import read, write  # noqa: E402


def main():
    torch.set_num_threads(1)
    mode, path = sys.argv[1], sys.argv[2]
    net = Net()
    if mode == "eval":
        net.load_state_dict(read(path))
    elif mode == "train":
        steps, seed = int(sys.argv[3]), int(sys.argv[4])
        torch.manual_seed(seed)
        net = Net()
        x, y = load("train")
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        order = torch.randperm(len(x))
        for s in range(steps):
            idx = order[s * 64:(s + 1) * 64]
            opt.zero_grad()
            F.nll_loss(net(x[idx]), y[idx]).backward()
            opt.step()
        write(path, net.state_dict())
    else:
        sys.exit(f"unknown mode {mode}: expected eval or train")
    xt, yt = load("test")
    print(f"accuracy {evaluate(net, xt, yt):.6f}")


if __name__ == "__main__":
    main()
