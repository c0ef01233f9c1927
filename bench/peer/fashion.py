"""Fashion-MNIST IDX loading and the reference models for the PyTorch peer programs.

Pixels are scaled to [0, 1] and not normalized (docs/reference.md), like cohort's reader.
"""
import gzip
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and dtype == 0x08, f"{path}: not a uint8 IDX file"
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data_dir=DEFAULT_DIR):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


class Net(nn.Module):
    """The DDP tutorial's CNN with the flatten size that fits 28x28 (2000)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 20, 5)
        self.fc1 = nn.Linear(2000, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def evaluate(model, x, y, batch=1000):
    """Test accuracy; x and y on the host, each batch moved to the model's device."""
    model.eval()
    correct = 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(x), batch):
            pred = model(x[i:i + batch].to(device)).argmax(1).cpu()
            correct += (pred == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")
