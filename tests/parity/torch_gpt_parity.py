"""PyTorch side of cohort's GPT parity test (tests/parity/gpt_parity_test.cc).

Usage: torch_gpt_parity.py DIR
Reads DIR/gpt_config.json ({n_layer, n_head, n_embd, block_size, vocab_size,
steps, lr, weight_decay}), DIR/gpt_init.safetensors (cohort's state_dict, both
transformer.wte.weight and lm_head.weight) and DIR/gpt_batches.safetensors
(x.<i>, y.<i> int64 [B, T]; y.ignore: y.0 with some targets -1), and writes
DIR/gpt_torch_out.safetensors with:
  gpt.logits [B, T, V], gpt.loss, gpt.grad.<param>   forward/backward on batch 0
  gpt.loss_ignore                                     loss of x.0 against y.ignore
  gpt.losses [steps], gpt.final.<param>               AdamW as nanoGPT configures
                                                      it (betas 0.9/0.95, weight
                                                      decay on 2-D tensors only)
  mha.out, mha.w, mha.g{q,k,v}, mha.grad.<param>      torch.nn.MultiheadAttention
                                                      from DIR/mha_in.safetensors
                                                      (init.<param>, q, k, v,
                                                      attn_mask, key_padding_mask,
                                                      c), with both masks, then
  mha.self_out, mha.self_gx                           self-attention without
                                                      masks or weights
The model is nanoGPT's (torch_gpt_model.py).
"""
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import read, write  # noqa: E402  (the safetensors reader/writer)
from torch_gpt_model import GPT  # noqa: E402


def make_model(cfg, init):
    model = GPT(cfg)
    model.load_state_dict(init)
    return model


def configure_optimizer(model, cfg):
    """nanoGPT's configure_optimizers: decay on tensors of 2 or more dims."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8)


def mha_parity(d, out):
    t = read(os.path.join(d, "mha_in.safetensors"))
    init = {k[len("init."):]: v for k, v in t.items() if k.startswith("init.")}
    e = init["in_proj_weight"].size(1)
    mha = nn.MultiheadAttention(e, int(t["num_heads"].item()))
    mha.load_state_dict(init)
    q, k, v = (t[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
    o, w = mha(q, k, v, key_padding_mask=t["key_padding_mask"].bool(),
               attn_mask=t["attn_mask"].bool())
    (o * t["c"]).sum().backward()
    out.update({"mha.out": o, "mha.w": w, "mha.gq": q.grad, "mha.gk": k.grad, "mha.gv": v.grad})
    for name, p in mha.named_parameters():
        out["mha.grad." + name] = p.grad.clone()  # the self-attention below adds to p.grad
    x = t["q"].clone().requires_grad_(True)
    o = mha(x, x, x, need_weights=False)[0]
    (o * t["c"]).sum().backward()
    out.update({"mha.self_out": o, "mha.self_gx": x.grad})


def main():
    torch.set_num_threads(1)
    d = sys.argv[1]
    with open(os.path.join(d, "gpt_config.json")) as f:
        cfg = json.load(f)
    init = read(os.path.join(d, "gpt_init.safetensors"))
    batches = read(os.path.join(d, "gpt_batches.safetensors"))
    out = {}

    model = make_model(cfg, init)
    logits, loss = model(batches["x.0"], batches["y.0"])
    loss.backward()
    out["gpt.logits"] = logits
    out["gpt.loss"] = loss
    for name, p in model.named_parameters():
        out["gpt.grad." + name] = p.grad
    with torch.no_grad():
        out["gpt.loss_ignore"] = model(batches["x.0"], batches["y.ignore"])[1]

    model = make_model(cfg, init)
    opt = configure_optimizer(model, cfg)
    losses = []
    for i in range(cfg["steps"]):
        opt.zero_grad()
        _, loss = model(batches["x.%d" % i], batches["y.%d" % i])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out["gpt.losses"] = torch.tensor(losses, dtype=torch.float64)
    for name, p in model.named_parameters():
        out["gpt.final." + name] = p
    mha_parity(d, out)
    write(os.path.join(d, "gpt_torch_out.safetensors"), out)


if __name__ == "__main__":
    main()
