// cohort's safetensors files read and written by PyTorch 1.13 (/usr/bin/python3).
// Debian has no python3-safetensors, so the Python side reads and writes the
// format with the standard library (json + struct) and torch, exactly as the
// format is specified; skipped when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/nn/models/toy_model.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScript = R"PY(
import json, struct, sys, torch
DT = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
      "U8": torch.uint8, "BF16": torch.bfloat16, "F16": torch.float16}
NAME = {v: k for k, v in DT.items()}

def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        s, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=DT[v["dtype"]])
        out[k] = t.reshape(v["shape"])
    return out, meta

def save(path, tensors):
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[k] = {"dtype": NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = torch.nn.Linear(10, 10)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(10, 5)
    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))

d = sys.argv[1]
weights, meta = load(d + "/ckpt/step-00000042/model.safetensors")
assert meta["format"] == "pt" and meta["cohort.step"] == "42", meta
model = ToyModel()
model.load_state_dict(weights)  # strict: names and shapes as PyTorch's
x, _ = load(d + "/x.safetensors")
with torch.no_grad():
    y = model(x["x"])
torch.manual_seed(0)
theirs = ToyModel()
save(d + "/out.safetensors", {"y": y})
save(d + "/torch_model.safetensors", theirs.state_dict())
with torch.no_grad():
    save(d + "/torch_y.safetensors", {"y": theirs(x["x"])})
)PY";

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

TEST(PyTorchInterop, ModelFilesLoadInPyTorchAndBack) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch not available";
  const fs::path dir = fs::temp_directory_path() / fmt::format("cohort_interop_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  Generator gen(5);
  nn::ToyModel model(gen);
  Tensor x = randn({4, 10}, gen);
  save_checkpoint((dir / "ckpt").string(), model, nullptr, {.step = 42});
  TensorDict xs;
  xs.insert("x", x);
  save_safetensors((dir / "x.safetensors").string(), xs);
  std::ofstream(dir / "script.py") << kScript;
  const std::string cmd =
      fmt::format("/usr/bin/python3 {} {}", (dir / "script.py").string(), dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  // PyTorch's forward with cohort's weights matches cohort's forward.
  Tensor y_torch = load_safetensors((dir / "out.safetensors").string()).tensors.at("y");
  Tensor y = model.forward(x);
  EXPECT_TRUE(allclose(y, y_torch, 1e-5, 1e-6)) << y << y_torch;

  // And PyTorch's weights load into cohort's model.
  nn::ToyModel theirs(gen);
  load_model((dir / "torch_model.safetensors").string(), theirs);
  Tensor y_theirs = load_safetensors((dir / "torch_y.safetensors").string()).tensors.at("y");
  EXPECT_TRUE(allclose(theirs.forward(x), y_theirs, 1e-5, 1e-6));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::checkpoint
