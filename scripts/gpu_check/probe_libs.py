#!/usr/bin/env python3
"""The CUDA libraries cohort's programs open, chosen and probed (scripts/gpu_check.sh, issue 44).

cohort links cudart and cuDNN's front library, and opens cuBLASLt and NCCL at first use;
cuDNN opens its sub-libraries (graph, engines, heuristic, ops, cnn, adv) at first use too. So
`ldd` sees none of the last ones: this opens each by its soname, as the programs will, and reads
/proc/self/maps for the file the loader took.

  probe_libs.py choose   prints the LD_LIBRARY_PATH for cohort's programs (one line)
  probe_libs.py probe    opens every library under the LD_LIBRARY_PATH it was started with and
                         prints one line each (soname, file, version), then one verdict line:
                         "PASS libraries: ..." or "FAIL libraries: ..."; exit status 1 on FAIL;
                         COHORT_BUILT_CUDNN (e.g. 91900): the cuDNN the bundle was built with,
                         noted when the one found is older

Each set of libraries comes whole from one place, the first that holds all of it: the toolkit
(/usr/local/cuda/lib64, /usr/local/cuda/lib), then the loader's cache (ldconfig -p), then the pip
packages of this python (nvidia/*/lib, PyTorch's). cuDNN's eight libraries come from one folder,
put first on the path, so no name of the set resolves to another copy (the toolkit's and pip's
cuDNN are never mixed). PyTorch keeps its own (its pip cuDNN): only cohort's programs get the path.
"""
import ctypes
import glob
import os
import subprocess
import sys

CUDNN_SUBS = ["graph", "engines_precompiled", "engines_runtime_compiled", "heuristic", "ops",
              "cnn", "adv"]
SETS = {
    "cudart": ["libcudart.so.13"],
    "cublasLt": ["libcublasLt.so.13"],
    "cudnn": ["libcudnn.so.9"] + [f"libcudnn_{s}.so.9" for s in CUDNN_SUBS],
    "nccl": ["libnccl.so.2"],
}


def toolkit_dirs():
    return [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                        "/usr/local/cuda/targets/x86_64-linux/lib") if os.path.isdir(d)]


def ldconfig_dirs():
    try:
        text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    dirs = []
    for line in text.splitlines():
        if "=>" in line:
            d = os.path.dirname(line.split("=>")[1].strip())
            if d not in dirs:
                dirs.append(d)
    return dirs


def pip_dirs():
    try:
        import nvidia  # the namespace package of NVIDIA's wheels; no import of torch
    except ImportError:
        return []
    dirs = []
    for root in nvidia.__path__:
        dirs += sorted(glob.glob(os.path.join(root, "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(root, "*", "*", "lib")))
    return dirs


def sources():
    """(place, folder) in the order of preference, each folder once (by its real path).
    GPU_CHECK_LIB_SOURCES="PLACE:DIR ..." replaces them (the script's test)."""
    given = os.environ.get("GPU_CHECK_LIB_SOURCES")
    if given is not None:
        return [tuple(x.split(":", 1)) for x in given.split()]
    seen, out = set(), []
    for place, dirs in (("toolkit", toolkit_dirs()), ("ldconfig", ldconfig_dirs()),
                        ("pip", pip_dirs())):
        for d in dirs:
            real = os.path.realpath(d)
            if real not in seen:
                seen.add(real)
                out.append((place, d))
    return out


def choose():
    """{set: (place, folder) or None} and the path: cuDNN's folder first."""
    chosen = {}
    for name, libs in SETS.items():
        chosen[name] = next(((p, d) for p, d in sources()
                             if all(os.path.exists(os.path.join(d, lib)) for lib in libs)), None)
    path = []
    for name in ["cudnn", "cudart", "cublasLt", "nccl"]:
        if chosen[name] and chosen[name][1] not in path:
            path.append(chosen[name][1])
    return chosen, path


def version(handle, soname):
    """The library's own version call, where it has a simple one."""
    try:
        if soname.startswith("libcudnn.so"):
            f = handle.cudnnGetVersion
            f.restype = ctypes.c_size_t
            return str(f())
        out = ctypes.c_int()
        for fn in ("cudaRuntimeGetVersion", "ncclGetVersion"):
            if hasattr(handle, fn):
                getattr(handle, fn)(ctypes.byref(out))
                return str(out.value)
        if hasattr(handle, "cublasLtGetVersion"):
            handle.cublasLtGetVersion.restype = ctypes.c_size_t
            return str(handle.cublasLtGetVersion())
    except (AttributeError, OSError):
        pass
    return "-"


def loaded_files():
    files = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                files.setdefault(os.path.basename(parts[5]), parts[5])
    return files


def probe():
    chosen, _ = choose()
    failures, lines, handles = [], [], {}
    for name, libs in SETS.items():
        for soname in libs:
            try:
                handles[soname] = ctypes.CDLL(soname)
            except OSError as e:
                failures.append(f"{soname}: {e}")
    files = loaded_files()
    for name, libs in SETS.items():
        for soname in libs:
            if soname not in handles:
                continue
            path = next((p for b, p in files.items() if b.startswith(soname)), "?")
            lines.append(f"  {soname:42s} {os.path.realpath(path)}  version "
                         f"{version(handles[soname], soname)}")
    cudnn_dirs = sorted({os.path.dirname(os.path.realpath(p)) for b, p in files.items()
                         if b.startswith("libcudnn")})
    if len(cudnn_dirs) > 1:
        failures.append(f"cuDNN loaded from {len(cudnn_dirs)} folders: {', '.join(cudnn_dirs)}")
    print("LD_LIBRARY_PATH for cohort: " + os.environ.get("LD_LIBRARY_PATH", ""))
    for name in SETS:
        c = chosen[name]
        print(f"  set {name}: " + (f"{c[0]} {c[1]}" if c else "nowhere whole"))
    others = [d for _, d in sources() if os.path.exists(os.path.join(d, "libcudnn.so.9"))
              and (not chosen["cudnn"] or os.path.realpath(d) != os.path.realpath(chosen["cudnn"][1]))]
    if others:
        print("  other cuDNN copies, not used by cohort: " + ", ".join(others))
    print("\n".join(lines))
    # The driver is the machine's (no set to choose): its absence is a note, as on machines
    # without a GPU; the tests then say what it means.
    try:
        drv = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        drv.cuDriverGetVersion(ctypes.byref(v))
        path = next((p for b, p in loaded_files().items() if b.startswith("libcuda.so")), "?")
        print(f"  {'libcuda.so.1 (the driver)':42s} {os.path.realpath(path)}  version {v.value}")
    except (OSError, AttributeError) as e:
        print(f"  libcuda.so.1 (the driver): not found ({e})")
    if failures:
        print("FAIL libraries: " + "; ".join(failures))
        return 1
    have = version(handles["libcudnn.so.9"], "libcudnn.so.9")
    built = os.environ.get("COHORT_BUILT_CUDNN", "")
    note = ""
    if built.isdigit() and have.isdigit() and int(have) < int(built):
        note = f"; note: older than the {built} headers cohort was built with"
    print(f"PASS libraries: all {sum(len(v) for v in SETS.values())} opened; cuDNN from one "
          f"folder ({cudnn_dirs[0] if cudnn_dirs else '-'}, version {have}{note})")
    return 0


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("choose", "probe"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "choose":
        print(":".join(choose()[1]))
        return 0
    return probe()


if __name__ == "__main__":
    sys.exit(main())
