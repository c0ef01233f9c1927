"""PyTorch side of cohort's parity test (tests/parity/parity_test.cc).

Usage: torch_parity.py DIR
Reads DIR/net_init.safetensors, DIR/net_batches.safetensors,
DIR/toy_init.safetensors, DIR/toy_batches.safetensors (written by the C++
test) and writes DIR/torch_out.safetensors with:
  net.out, net.loss, net.grad.<param>      forward/backward of Net on batch 0
  net.losses [20], net.norms [20], net.final.<param>
                                           20 steps of SGD(lr 0.01, momentum 0.9)
                                           with clip_grad_norm(10), NLL loss
  toy.<opt>.losses [20], toy.<opt>.final.<param>
                                           20 steps of Adam / AdamW(amsgrad) on
                                           ToyModel with MSE loss
  sched.<name> [15]                        lrs of StepLR, CosineAnnealingLR, LinearLR
  <layer>.*                                BatchNorm2d, LayerNorm, GELU/Tanh/Sigmoid,
                                           Embedding, cross_entropy, strided padded
                                           Conv2d, padded MaxPool2d: outputs and
                                           gradients on DIR/layers_in.safetensors
Files use the safetensors layout, read and written here with json + numpy so
that no extra Python package is needed.
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                "peer"))
from fashion import Net, ToyModel  # noqa: E402  (the peer programs' models)

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + b:8 + n + e], dtype=DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().numpy().copy(order="C")
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def net_parity(d, out):
    model = Net()
    model.load_state_dict(read(os.path.join(d, "net_init.safetensors")))
    batches = read(os.path.join(d, "net_batches.safetensors"))
    steps = sum(1 for k in batches if k.startswith("x."))
    x0, y0 = batches["x.0"], batches["y.0"]
    o = model(x0)
    loss = F.nll_loss(o, y0)
    loss.backward()
    out["net.out"] = o
    out["net.loss"] = loss.reshape([])
    for name, p in model.named_parameters():
        out["net.grad." + name] = p.grad.clone()
    model.zero_grad()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses, norms = [], []
    for i in range(steps):
        opt.zero_grad()
        loss = F.nll_loss(model(batches[f"x.{i}"]), batches[f"y.{i}"])
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)))
        opt.step()
        losses.append(loss.item())
    out["net.losses"] = torch.tensor(losses, dtype=torch.float64)
    out["net.norms"] = torch.tensor(norms, dtype=torch.float64)
    for name, p in model.named_parameters():
        out["net.final." + name] = p


def toy_parity(d, out):
    init = read(os.path.join(d, "toy_init.safetensors"))
    batches = read(os.path.join(d, "toy_batches.safetensors"))
    steps = sum(1 for k in batches if k.startswith("x."))
    makers = {
        "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05, amsgrad=True),
    }
    for key, make in makers.items():
        model = ToyModel()
        model.load_state_dict(init)
        opt = make(model.parameters())
        losses = []
        for i in range(steps):
            opt.zero_grad()
            loss = F.mse_loss(model(batches[f"x.{i}"]), batches[f"y.{i}"])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out[f"toy.{key}.losses"] = torch.tensor(losses, dtype=torch.float64)
        for name, p in model.named_parameters():
            out[f"toy.{key}.final.{name}"] = p


def schedulers(out):
    sched = torch.optim.lr_scheduler
    makers = {
        "step": lambda o: sched.StepLR(o, step_size=3, gamma=0.5),
        "cosine": lambda o: sched.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
        "linear": lambda o: sched.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4),
    }
    for key, make in makers.items():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        s = make(opt)
        lrs = []
        for _ in range(15):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        out["sched." + key] = torch.tensor(lrs, dtype=torch.float64)


def layer_parity(d, out):
    """Each layer on the inputs in layers_in: output, and the gradients of
    sum(output * c) for a fixed random c."""
    t = read(os.path.join(d, "layers_in.safetensors"))
    nn = torch.nn

    def grads(y, c, *leaves):
        (y * c).sum().backward()
        return [leaf.grad for leaf in leaves]

    # BatchNorm2d: two training steps, then eval.
    bn = nn.BatchNorm2d(3)
    bn.load_state_dict({"weight": t["bn.weight"], "bias": t["bn.bias"],
                        "running_mean": torch.zeros(3), "running_var": torch.ones(3),
                        "num_batches_tracked": torch.tensor(0)})
    x1 = t["bn.x1"].clone().requires_grad_()
    y1 = bn(x1)
    y2 = bn(t["bn.x2"])
    ((y1 * t["bn.c"]).sum() + (y2 * t["bn.c"]).sum()).backward()
    out.update({"bn.y1": y1, "bn.y2": y2, "bn.gx1": x1.grad, "bn.gweight": bn.weight.grad,
                "bn.gbias": bn.bias.grad, "bn.running_mean": bn.running_mean,
                "bn.running_var": bn.running_var,
                "bn.num_batches_tracked": bn.num_batches_tracked})
    bn.eval()
    out["bn.y_eval"] = bn(t["bn.x1"])

    ln = nn.LayerNorm([4, 5])
    ln.load_state_dict({"weight": t["ln.weight"], "bias": t["ln.bias"]})
    x = t["ln.x"].clone().requires_grad_()
    y = ln(x)
    gx, gw, gb = grads(y, t["ln.c"], x, ln.weight, ln.bias)
    out.update({"ln.y": y, "ln.gx": gx, "ln.gweight": gw, "ln.gbias": gb})

    for name, fn in {"gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}.items():
        x = t["act.x"].clone().requires_grad_()
        y = fn(x)
        (gx,) = grads(y, t["act.c"], x)
        out.update({f"{name}.y": y, f"{name}.gx": gx})

    emb = nn.Embedding(10, 4, padding_idx=2)
    emb.load_state_dict({"weight": t["emb.weight"]})
    y = emb(t["emb.idx"])
    (gw,) = grads(y, t["emb.c"], emb.weight)
    out.update({"emb.y": y, "emb.gweight": gw})

    logits = t["ce.logits"].clone().requires_grad_()
    loss = F.cross_entropy(logits, t["ce.target"])
    loss.backward()
    out.update({"ce.loss": loss.reshape([]), "ce.glogits": logits.grad})

    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    conv.load_state_dict({"weight": t["conv.weight"], "bias": t["conv.bias"]})
    x = t["conv.x"].clone().requires_grad_()
    y = conv(x)
    gx, gw, gb = grads(y, t["conv.c"], x, conv.weight, conv.bias)
    out.update({"conv.y": y, "conv.gx": gx, "conv.gweight": gw, "conv.gbias": gb})

    x = t["pool.x"].clone().requires_grad_()
    y = F.max_pool2d(x, 3, stride=2, padding=1)
    (gx,) = grads(y, t["pool.c"], x)
    out.update({"pool.y": y, "pool.gx": gx})


def main():
    torch.set_num_threads(1)
    d = sys.argv[1]
    out = {}
    net_parity(d, out)
    toy_parity(d, out)
    layer_parity(d, out)
    schedulers(out)
    write(os.path.join(d, "torch_out.safetensors"), out)


if __name__ == "__main__":
    main()
