#include "cohort/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"
#include "cohort/checkpoint/atomic_file.h"

namespace cohort::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swaps");

using ordered_json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100 * 1000 * 1000;  // the reference implementation's cap
constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw IoError(fmt::format("safetensors: '{}': {}", path, problem));
}

// numel * element size, or false on overflow / negative sizes.
bool byte_count(const Shape& shape, DType dtype, uint64_t* out) {
  unsigned __int128 n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return false;
    n *= static_cast<uint64_t>(d);
    if (n > (static_cast<unsigned __int128>(1) << 62)) return false;
  }
  *out = static_cast<uint64_t>(n);
  return true;
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno(fmt::format("safetensors: '{}': fstat", path), errno);
  return static_cast<uint64_t>(st.st_size);
}

SafetensorsHeader parse_header(int fd, const std::string& path) {
  const uint64_t size = file_size(fd, path);
  if (size < 8)
    fail(path, fmt::format("truncated: {} bytes, the header length alone needs 8", size));
  uint8_t len_bytes[8];
  pread_all(fd, len_bytes, 8, 0, fmt::format("safetensors: '{}'", path));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} exceeds the {} byte limit (not a safetensors file?)",
                           n, kMaxHeaderBytes));
  if (n > size - 8)
    fail(path, fmt::format("truncated: header length {} but only {} bytes follow", n, size - 8));
  std::string text(n, '\0');
  pread_all(fd, text.data(), n, 8, fmt::format("safetensors: '{}'", path));

  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("bad JSON header: {}", e.what()));
  }
  if (!j.is_object()) fail(path, "bad header: the JSON is not an object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const ordered_json& v = it.value();
    if (name == kMetadataKey) {
      if (!v.is_object()) fail(path, "bad header: __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(path,
               fmt::format("bad header: __metadata__ value of '{}' is not a string", m.key()));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      fail(path, fmt::format("bad header: entry '{}' needs dtype, shape and data_offsets", name));
    const auto& dt = v["dtype"];
    const auto& shape = v["shape"];
    const auto& offsets = v["data_offsets"];
    if (!dt.is_string()) fail(path, fmt::format("bad header: dtype of '{}' is not a string", name));
    TensorInfo info;
    info.name = name;
    if (!parse_safetensors_dtype(dt.get<std::string>(), &info.dtype))
      fail(path, fmt::format("tensor '{}' has unknown dtype '{}' (cohort reads F32, F64, I64, "
                             "I32, U8, BF16, F16)",
                             name, dt.get<std::string>()));
    if (!shape.is_array())
      fail(path, fmt::format("bad header: shape of '{}' is not an array", name));
    for (const auto& d : shape) {
      if (!d.is_number_unsigned())
        fail(path, fmt::format("bad header: shape of '{}' has a non-integer or negative size {}",
                               name, d.dump()));
      info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(path, fmt::format("bad header: data_offsets of '{}' must be [begin, end], got {}", name,
                             offsets.dump()));
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (!byte_count(info.shape, info.dtype, &bytes))
      fail(path, fmt::format("tensor '{}' shape {} is too large", name, shape_str(info.shape)));
    if (info.end < info.begin || info.end - info.begin != bytes)
      fail(path, fmt::format("tensor '{}' ({} {}) needs {} bytes but data_offsets are [{}, {}]",
                             name, safetensors_dtype(info.dtype), shape_str(info.shape), bytes,
                             info.begin, info.end));
    h.tensors.push_back(std::move(info));
  }

  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  const uint64_t data_size = size - h.data_start;
  uint64_t covered = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorInfo& t = h.tensors[i];
    if (t.end > data_size)
      fail(path, fmt::format("truncated or corrupt: tensor '{}' data_offsets [{}, {}] run past the "
                             "{} byte data section",
                             t.name, t.begin, t.end, data_size));
    if (t.begin < covered)
      fail(path, fmt::format("tensor '{}' data_offsets [{}, {}] overlap tensor '{}' (ends at {})",
                             t.name, t.begin, t.end, h.tensors[i - 1].name, covered));
    if (t.begin > covered)
      fail(path, fmt::format("hole in the data section: bytes [{}, {}) before tensor '{}' belong "
                             "to no tensor",
                             covered, t.begin, t.name));
    covered = t.end;
  }
  if (covered != data_size)
    fail(path, fmt::format("the data section has {} bytes but the tensors cover {} ({} trailing "
                           "bytes)",
                           data_size, covered, data_size - covered));
  return h;
}

UniqueFd open_for_read(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_errno(fmt::format("safetensors: cannot open '{}'", path), errno);
  return fd;
}

}  // namespace

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kUInt8:
      return "U8";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view name, DType* out) {
  static constexpr DType kAll[] = {DType::kFloat32, DType::kFloat64,  DType::kInt64,  DType::kInt32,
                                   DType::kUInt8,   DType::kBFloat16, DType::kFloat16};
  for (DType d : kAll) {
    if (safetensors_dtype(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string safetensors_header_bytes(const TensorDict& tensors, const Metadata& metadata) {
  std::vector<TensorInfo> infos;
  for (const auto& [name, t] : tensors) {
    COHORT_CHECK(t.defined(), "save_safetensors: tensor '{}' is undefined", name);
    infos.push_back({name, t.dtype(), t.sizes()});
  }
  return safetensors_header_bytes(infos, metadata);
}

std::string safetensors_header_bytes(const std::vector<TensorInfo>& tensors,
                                     const Metadata& metadata) {
  ordered_json j = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    const std::string& name = t.name;
    COHORT_CHECK(!name.empty() && name != kMetadataKey,
                 "save_safetensors: invalid tensor name '{}'", name);
    uint64_t bytes = 0;
    COHORT_CHECK(byte_count(t.shape, t.dtype, &bytes),
                 "save_safetensors: tensor '{}' shape {} is too large", name, shape_str(t.shape));
    j[name] = {{"dtype", std::string(safetensors_dtype(t.dtype))},
               {"shape", t.shape},
               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = j.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the
  // reference writer does (lets readers map the data in place).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + text;
}

void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata) {
  const std::string header = safetensors_header_bytes(tensors, metadata);
  AtomicFile file(path);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    // A tensor on a device is written from its host copy: files are
    // device-independent, and a GPU run resumes on the CPU and back.
    Tensor c = t.cpu().contiguous();
    if (c.nbytes() > 0) file.write(c.raw_data(), c.nbytes());
  }
  file.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  UniqueFd fd = open_for_read(path);
  return parse_header(fd.get(), path);
}

SafetensorsContents load_safetensors(const std::string& path) {
  UniqueFd fd = open_for_read(path);
  SafetensorsHeader h = parse_header(fd.get(), path);
  SafetensorsContents out;
  out.metadata = std::move(h.metadata);
  for (const TensorInfo& info : h.tensors) {
    if (out.tensors.contains(info.name))
      fail(path, fmt::format("tensor '{}' appears twice", info.name));
    Tensor t = Tensor::empty(info.shape, info.dtype);
    if (t.nbytes() > 0)
      pread_all(fd.get(), t.raw_data(), t.nbytes(), h.data_start + info.begin,
                fmt::format("safetensors: '{}': tensor '{}'", path, info.name));
    out.tensors.insert(info.name, std::move(t));
  }
  return out;
}

}  // namespace cohort::checkpoint
