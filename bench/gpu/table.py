#!/usr/bin/python3
"""The table of bench/gpu/run.sh (issue 35): reads what each piece left in WORK_DIR and prints
the rows, the ratios against PyTorch and the issue's targets, met or not.

Each piece NAME left NAME.out (its stdout), NAME.err (its stderr) and NAME.rc (its exit status):
  peak               bench/gpu/bf16_peak.py: one JSON line, "tflops"
  cohort_gpt         bench_gpt --device cuda: one JSON line (ms_step, mfu, peak_gpu_mib, ...)
  torch_gpt_eager    bench/gpt/torch_gpt.py --device cuda: the same fields
  torch_gpt_compile  the same with --compile
  cohort_net         cohort train --device cuda --model net: its progress lines, and
                     cohort_net.metrics (--metrics: one JSON object per epoch, "type": "epoch")
  torch_net          bench/peer/torch_train.py --device cuda: one JSON line (seconds,
                     test_accuracy)
A piece that failed, was skipped (exit status 3: this torch lacks the feature) or never ran
(no .rc) gets its row with the reason: the last line of its stderr.

Usage: table.py WORK_DIR [--gpu TEXT] [--date TEXT] [--torch TEXT] [--steps N] [--warmup N]
                [--gpt-shape TEXT] [--device TEXT]
"""
import argparse
import json
import math
import os
import re
import sys

SKIPPED = 3  # torch_gpt.py's status for a feature this torch lacks
TIMED_OUT = (124, 137)  # timeout(1)'s statuses


class Piece:
    """One program's result: `json` (its last JSON line) or `error` (why there is none)."""

    def __init__(self, work, name):
        self.name = name
        self.json = None
        self.error = None
        self.out = read(os.path.join(work, name + ".out"))
        rc_text = read(os.path.join(work, name + ".rc")).strip()
        err = read(os.path.join(work, name + ".err"))
        why = last_line(err)
        if rc_text == "":
            self.error = "did not run" + (f": {why}" if why else "")
            return
        rc = int(rc_text)
        if rc in TIMED_OUT:
            self.error = f"timed out (exit {rc})" + (f"; last: {why}" if why else "")
        elif rc == SKIPPED:
            self.error = why if "skipped" in why else "skipped: " + (why or "exit 3")
        elif rc != 0:
            self.error = f"failed (exit {rc}): " + (why or "no message")
        else:
            self.json = last_json(self.out)
            if self.json is None:
                self.error = "no JSON line in its output" + (f"; stderr: {why}" if why else "")

    def get(self, key):
        """A number of its JSON, or None (missing, null, failed)."""
        if self.json is None:
            return None
        v = self.json.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_line(text):
    """An error's gist: the last line of stderr (an exception's message), after the first where
    they differ (a usage error's message comes first, a traceback's header too)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return line if len(line) <= 300 else line[:297] + "..."


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def cohort_net(work):
    """cohort train's epoch: its --metrics record, else its "epoch 1: ..." progress line."""
    p = Piece(work, "cohort_net")
    if p.error is not None and not p.error.startswith("no JSON"):
        return p
    p.error = None
    epochs = []
    for line in read(os.path.join(work, "cohort_net.metrics")).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "epoch":
            epochs.append(rec)
    if epochs:
        e = epochs[-1]
        p.json = {"seconds": e.get("seconds"), "test_accuracy": e.get("test_accuracy")}
        return p
    # train_progress.cc: "epoch 1: train loss 0.5123, test accuracy 0.8456, 12.3 s, 4878 samples/s"
    m = None
    for m in re.finditer(r"^epoch (\d+)[^:]*: train loss \S+, test accuracy ([0-9.]+), "
                         r"([0-9.]+) s,", p.out, re.M):
        pass
    if m:
        p.json = {"seconds": float(m.group(3)), "test_accuracy": float(m.group(2))}
    else:
        p.error = "no epoch line in its output"
    return p


def fmt(v, digits):
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(headers, rows):
    """Plain text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    out = []
    for r in [headers] + rows:
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                 for i, c in enumerate(r)]
        out.append("  ".join(cells).rstrip())
    return out


def verdict(value, bound, what):
    if value is None:
        return f"  {what}: not measured"
    return f"  {what}: {value:.2f} -> {'met' if value <= bound else 'NOT met'}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--gpu", default="unknown")
    ap.add_argument("--date", default="")
    ap.add_argument("--torch", default="")
    ap.add_argument("--steps", default="?")
    ap.add_argument("--warmup", default="?")
    ap.add_argument("--gpt-shape", default="")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    lines = [f"GPU benchmark (issue 35, bench/gpu/run.sh) on {a.gpu}; {a.date}; torch {a.torch}; "
             f"device {a.device}"]
    failures = []

    peak = Piece(a.work, "peak")
    tflops = peak.get("tflops")
    if tflops is not None:
        lines.append(f"bf16 GEMM peak: {tflops:.1f} TFLOP/s (torch.matmul {peak.json.get('n')}^3 "
                     f"bf16, median of {peak.json.get('runs')}; the MFU denominator)")
    else:
        lines.append(f"bf16 GEMM peak: {peak.error} (MFU not computed)")
        failures.append(("peak", peak.error))

    gpt = [("cohort", Piece(a.work, "cohort_gpt")),
           ("PyTorch eager", Piece(a.work, "torch_gpt_eager")),
           ("PyTorch torch.compile", Piece(a.work, "torch_gpt_compile"))]
    c = gpt[0][1]
    lines += ["", f"GPT ({a.gpt_shape}), bf16 autocast, fp32 master weights, AdamW; "
              f"median ms/step of {a.steps} steps after {a.warmup} warm-up"]
    rows, errs = [], []
    for label, p in gpt:
        if p.error is not None:
            errs.append(f"{label}: {p.error}")
            failures.append((p.name, p.error))
            continue
        mfu = p.get("mfu")
        if p.json.get("impl") == "torch":  # what the peer ran: attention sdpa, AdamW fused
            label += f" ({p.json.get('attention')} attention, {p.json.get('adamw')} AdamW)"
        rows.append([label, fmt(p.get("ms_step"), 1),
                     fmt(ratio(c.get("ms_step"), p.get("ms_step")), 2),
                     fmt(None if mfu is None else 100 * mfu, 1), fmt(p.get("peak_gpu_mib"), 0),
                     fmt(ratio(c.get("peak_gpu_mib"), p.get("peak_gpu_mib")), 2),
                     fmt(p.get("loss_last"), 3)])
    lines += table(["run", "ms/step", "cohort/run", "MFU %", "peak GPU MiB", "cohort/run",
                    "last loss"], rows) + errs

    net = [("cohort", cohort_net(a.work)), ("PyTorch eager", Piece(a.work, "torch_net"))]
    cn = net[0][1]
    lines += ["", "Net (the tutorials' CNN) on Fashion-MNIST, 1 epoch, batch 64, fp32; "
              "s/epoch without the evaluation"]
    rows, errs = [], []
    for label, p in net:
        if p.error is not None:
            errs.append(f"{label}: {p.error}")
            failures.append((p.name, p.error))
            continue
        rows.append([label, fmt(p.get("seconds"), 2),
                     fmt(ratio(cn.get("seconds"), p.get("seconds")), 2),
                     fmt(p.get("test_accuracy"), 4)])
    lines += table(["run", "s/epoch", "cohort/run", "test accuracy"], rows) + errs

    eager, comp = gpt[1][1], gpt[2][1]
    mfu = c.get("mfu")
    lines += ["", "Targets (issue 35):",
              verdict(ratio(c.get("ms_step"), eager.get("ms_step")), 1.0,
                      "GPT ms/step cohort / PyTorch eager <= 1.0"),
              verdict(ratio(c.get("ms_step"), eager.get("ms_step")), 0.8,
                      "GPT ms/step cohort / PyTorch eager <= 0.8 (goal)"),
              verdict(ratio(c.get("ms_step"), comp.get("ms_step")), 1.0,
                      "GPT ms/step cohort / torch.compile <= 1.0 (goal)"),
              "  GPT MFU >= 45 % (goal): " +
              (f"{100 * mfu:.1f} % -> {'met' if mfu >= 0.45 else 'NOT met'}"
               if mfu is not None else "not measured"),
              verdict(ratio(c.get("peak_gpu_mib"), eager.get("peak_gpu_mib")), 1.0,
                      "GPT peak GPU memory cohort / PyTorch eager <= 1.0"),
              verdict(ratio(cn.get("seconds"), net[1][1].get("seconds")), 0.5,
                      "Net s/epoch cohort / PyTorch <= 0.5")]
    if failures:
        lines += ["", f"{len(failures)} piece(s) without a result: " +
                  ", ".join(name for name, _ in failures)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
