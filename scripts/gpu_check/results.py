#!/usr/bin/env python3
"""The verdicts of scripts/gpu_check.sh (issue 44): each prints one line, "RESULT PASS|FAIL|SKIP
NAME: ...", that the script copies into summary.txt. Standard library only (it runs under the
device machine's python3 and this machine's).

  results.py gtest NAME LIMIT_S XML:LOG:RC...  a gtest binary's runs (a run that died is
                                             followed by one of the tests it had not reached):
                                             passed, failed (by name; the test a run died in
                                             too), skipped (by name and reason: one skipped test
                                             is one skip; all skipped for want of a GPU is SKIP)
  results.py done-tests LOG                  the tests a run that died finished or died in
                                             (':'-joined, for --gtest_filter=-...)
  results.py net NAME GPU_JSONL REF_JSONL RC  test accuracy of the last epoch, bound 0.5 points
  results.py gpt NAME GPU_JSONL REF_JSONL RC STEPS  per-step losses, bound 2e-3
  results.py equal NAME M1 M2 C1 C2 LOSS_BOUND WEIGHT_BOUND  two runs' losses and checkpoints
  results.py ddp1 SINGLE_JSONL DDP_JSONL      DDP at world size 1 against plain, steps 10-30
  results.py limits DIR                      what the device tool returns from DIR ($OUT): at
                                             most 8 files, 16 MiB each, 64 MiB in all, 2 folders
                                             down, plain names; exit status 1 when broken
"""
import array
import json
import os
import re
import struct
import sys
import xml.etree.ElementTree as ET

MIB = 1 << 20
MAX_FILES, MAX_FILE, MAX_TOTAL, MAX_DEPTH = 8, 16 * MIB, 64 * MIB, 2
NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")
NO_GPU = "no usable CUDA device"


def result(verdict, name, text):
    print(f"RESULT {verdict} {name}: {text}")


def from_log(text):
    """What a run without XML (it died or was stopped) finished, from its log: (passed, failed,
    skipped, the test it was in when it ended or None)."""
    passed, failed, skipped, current = [], [], [], None
    for line in text.splitlines():
        m = re.match(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (\S+)( \(\d+ ms\))?$", line)
        if not m:
            continue
        what, test = m.group(1), m.group(2)
        if what == "RUN":
            current = test
        elif m.group(3):  # the per-test lines end with "(N ms)"; the summary's do not
            {"OK": passed, "FAILED": failed, "SKIPPED": skipped}[what].append(test)
            current = None
    return passed, failed, skipped, current


def done_tests(log):
    """The tests a run without XML finished or died in, ':'-joined (a gtest negative filter)."""
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    passed, failed, skipped, current = from_log(text)
    print(":".join(passed + failed + skipped + ([current] if current else [])))


def gtest(name, limit, *runs):
    """runs: XML:LOG:RC for each attempt; an attempt without XML died (or was stopped) in a test,
    which is counted as failed, and the next attempt ran the tests it had not reached."""
    passed, failed, skipped = [], [], []
    rc_bad = []
    for run in runs:
        xml, log, rc = run.rsplit(":", 2)
        rc = int(rc)
        try:
            root = ET.parse(xml).getroot()
        except (OSError, ET.ParseError):
            root = None
        if root is None:
            text = open(log, errors="replace").read() if os.path.exists(log) else ""
            p, f, sk, current = from_log(text)
            passed += p
            failed += [(t, ["failed (see its log)"]) for t in f]
            skipped += [(t, "skipped (see its log)") for t in sk]
            why = f"timed out after {limit} s" if rc in (124, 137) else f"exit {rc}"
            failed.append((current or "(before the first test)", [f"the run ended here: {why}"]))
            continue
        if rc != 0:
            rc_bad.append(rc)
        for case in root.iter("testcase"):
            full = f"{case.get('classname')}.{case.get('name')}"
            f = case.find("failure")
            sk = case.find("skipped")
            if f is not None:
                failed.append((full, (f.get("message") or "").splitlines()[-1:]))
            elif sk is not None or case.get("result") == "skipped":
                msg = (sk.get("message") if sk is not None else "") or ""
                skipped.append((full, msg.splitlines()[-1] if msg else "no reason given"))
            elif case.get("status", "run") == "run":
                passed.append(full)
    rc = rc_bad[0] if rc_bad else 0
    total = len(passed) + len(failed) + len(skipped)
    counts = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped of {total}"
    lines = []
    if failed:
        lines += [f"  failed {n}: {m[0] if m else ''}"[:300] for n, m in failed[:40]]
    if skipped and len(skipped) < total:
        lines += [f"  skipped {n}: {m}"[:300] for n, m in skipped[:40]]
    if rc != 0 and not failed:
        failed_note = f" (exit {rc}" + (f", timed out after {limit} s" if rc in (124, 137) else "") + ")"
    else:
        failed_note = ""
    if failed or rc != 0:
        names = ", ".join(n for n, _ in failed[:3]) + (", ..." if len(failed) > 3 else "")
        result("FAIL", name, counts + failed_note + (f"; failed: {names}" if failed else ""))
    elif total == 0:
        result("FAIL", name, "no test ran")
    elif len(skipped) == total:
        reasons = sorted({m for _, m in skipped})
        gpu = all(NO_GPU in m for m in reasons)
        result("SKIP", name, f"all {total} skipped" +
               (f", the GPU was not usable: {reasons[0]}" if gpu else ": " + "; ".join(reasons[:3])))
    else:
        why = ""
        if skipped:
            groups = {}
            for _, m in skipped:
                groups[m] = groups.get(m, 0) + 1
            top = sorted(groups.items(), key=lambda kv: -kv[1])[:2]
            why = " (skips: " + "; ".join(f"{k} x {m[:120]}" for m, k in top) + \
                  (f"; {len(groups) - 2} more reasons" if len(groups) > 2 else "") + ")"
        result("PASS", name, counts + why)
    for line in lines:
        print(line)


def records(path, kind):
    try:
        return [r for r in map(json.loads, open(path)) if r.get("type") == kind]
    except (OSError, ValueError):
        return []


def net(name, gpu_p, ref_p, rc):
    g, c = records(gpu_p, "epoch"), records(ref_p, "epoch")
    if not g or not c:
        return result("FAIL", name, f"no accuracy (device run exit {rc}: {len(g)} epochs; "
                      f"reference: {len(c)} epochs in {ref_p})")
    a, b = g[-1]["test_accuracy"], c[-1]["test_accuracy"]
    d = abs(a - b) * 100
    result("PASS" if d <= 0.5 else "FAIL", name,
           f"test accuracy device {a * 100:.2f} % reference cpu {b * 100:.2f} %, |diff| {d:.2f} "
           f"points (bound 0.5), {g[-1].get('seconds', 0):.1f} s on the device")


def gpt(name, gpu_p, ref_p, rc, steps):
    steps = int(steps)
    g = [r["loss"] for r in records(gpu_p, "step")]
    c = [r["loss"] for r in records(ref_p, "step")]
    n = min(len(g), len(c))
    if n < steps:
        return result("FAIL", name, f"{len(g)} device steps (exit {rc}), {len(c)} reference "
                      f"steps, {steps} wanted")
    worst = max(abs(a - b) for a, b in zip(g[:n], c[:n]))
    result("PASS" if worst <= 2e-3 else "FAIL", name,
           f"{n} steps, loss {g[0]:.4f} -> device {g[n - 1]:.4f} / reference cpu {c[n - 1]:.4f}, "
           f"max |diff| {worst:.2e} (bound 2e-3)")


def tensors(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for key, t in head.items():
        if key != "__metadata__" and t["dtype"] == "F32":
            b, e = t["data_offsets"]
            out[key] = array.array("f", body[b:e])
    return out


def equal(name, m1, m2, c1, c2, loss_bound, weight_bound):
    try:
        e1, e2 = records(m1, "epoch")[-1], records(m2, "epoch")[-1]
        t1, t2 = tensors(c1), tensors(c2)
    except (OSError, ValueError, IndexError, KeyError, struct.error) as ex:
        return result("FAIL", name, f"no result to compare ({type(ex).__name__}: {ex})")
    dl = max(abs(e1["train_loss"] - e2["train_loss"]), abs(e1["test_loss"] - e2["test_loss"]))
    if sorted(t1) != sorted(t2):
        return result("FAIL", name, f"the checkpoints hold different tensors: {sorted(t1)} vs "
                      f"{sorted(t2)}")
    dw, worst = 0.0, ""
    for k in t1:
        d = max((abs(a - b) for a, b in zip(t1[k], t2[k])), default=0.0)
        if d > dw:
            dw, worst = d, k
    ok = dl <= float(loss_bound) and dw <= float(weight_bound) and e1["step"] == e2["step"]
    result("PASS" if ok else "FAIL", name,
           f"{e2['step']} steps, train loss {e1['train_loss']:.5f} vs {e2['train_loss']:.5f}, "
           f"test loss {e1['test_loss']:.5f} vs {e2['test_loss']:.5f}, max |loss diff| {dl:.2e} "
           f"(bound {loss_bound}), max |weight diff| {dw:.2e} in {worst or '-'} "
           f"(bound {weight_bound})")


def ddp1(single_p, ddp_p):
    def span(p):
        s = {r["step"]: r["seconds"] for r in records(p, "step")}
        return s[30] - s[10] if 10 in s and 30 in s else None

    single, ddp = span(single_p), span(ddp_p)
    if single is None or ddp is None:
        return result("FAIL", "ddp world 1", f"no step times (single {single}, ddp {ddp})")
    over = (ddp / single - 1) * 100
    result("PASS" if over <= 3 else "FAIL", "ddp world 1",
           f"steps 10-30 took {ddp:.3f} s under DDP, {single:.3f} s plain: {over:+.1f} % "
           f"(bound <= 3 %)")


def limits(top):
    """Checks DIR against what the device tool returns; prints each breach."""
    files, breaches, total = [], [], 0
    for root, dirs, names in os.walk(top):
        rel = os.path.relpath(root, top)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        for d in dirs:
            if not NAME_OK.match(d):
                breaches.append(f"folder name {os.path.join(rel, d)!r}: only letters, digits, '.', "
                                "'_' and '-' come back")
        for n in names:
            p = os.path.join(root, n)
            r = os.path.normpath(os.path.join(rel, n))
            if os.path.islink(p) or not os.path.isfile(p):
                breaches.append(f"{r}: not a plain file (does not come back)")
                continue
            size = os.path.getsize(p)
            total += size
            files.append((r, size))
            if depth > MAX_DEPTH:
                breaches.append(f"{r}: {depth} folders down (at most {MAX_DEPTH} come back)")
            if size > MAX_FILE:
                breaches.append(f"{r}: {size / MIB:.1f} MiB (at most 16 MiB a file)")
            if not NAME_OK.match(n):
                breaches.append(f"{r}: its name has characters that do not come back")
    if len(files) > MAX_FILES:
        breaches.append(f"{len(files)} files (at most {MAX_FILES} come back)")
    if total > MAX_TOTAL:
        breaches.append(f"{total / MIB:.1f} MiB in all (at most 64 MiB)")
    listing = ", ".join(f"{r} ({s / 1024:.0f} KiB)" for r, s in sorted(files))
    if breaches:
        print(f"FAIL returned files of {top}: " + "; ".join(breaches) + f" [{listing}]")
        return 1
    print(f"PASS returned files of {top}: {len(files)} files (<= {MAX_FILES}), "
          f"{total / MIB:.2f} MiB (<= 64): {listing}")
    return 0


def main():
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    funcs = {"done-tests": (done_tests, 1), "net": (net, 4), "gpt": (gpt, 5), "equal": (equal, 7),
             "ddp1": (ddp1, 2), "limits": (limits, 1)}
    if cmd == "gtest" and len(args) >= 3:
        return gtest(*args) or 0
    if cmd not in funcs or len(args) != funcs[cmd][1]:
        print(__doc__, file=sys.stderr)
        return 2
    return funcs[cmd][0](*args) or 0


if __name__ == "__main__":
    sys.exit(main())
