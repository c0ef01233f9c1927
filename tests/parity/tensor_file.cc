#include "tensor_file.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace cohort::parity {

namespace {

const char* code(DType t) {
  switch (t) {
    case kFloat32:
      return "F32";
    case kFloat64:
      return "F64";
    case kInt64:
      return "I64";
    default:
      throw InvalidArgument(fmt::format("tensor_file: unsupported dtype {}", dtype_name(t)));
  }
}

DType from_code(const std::string& c, const std::string& path) {
  if (c == "F32") return kFloat32;
  if (c == "F64") return kFloat64;
  if (c == "I64") return kInt64;
  throw IoError(fmt::format("tensor_file: {}: unsupported dtype '{}'", path, c));
}

}  // namespace

void write_tensor_file(const std::string& path, const TensorDict& dict) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<Tensor> data;
  size_t offset = 0;
  for (const auto& [name, t] : dict) {
    Tensor c = t.contiguous();
    header[name] = {{"dtype", code(c.dtype())},
                    {"shape", c.sizes()},
                    {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    data.push_back(c);
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError("tensor_file: cannot write " + path);
  uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Tensor& t : data)
    out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  if (!out) throw IoError("tensor_file: write failed for " + path);
}

TensorDict read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("tensor_file: cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw IoError("tensor_file: " + path + " is truncated");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) throw IoError("tensor_file: " + path + " has a bad header length");
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  const size_t base = 8 + n;
  TensorDict out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    DType dt = from_code(info.at("dtype").get<std::string>(), path);
    Shape shape = info.at("shape").get<Shape>();
    size_t b = info.at("data_offsets")[0].get<size_t>(),
           e = info.at("data_offsets")[1].get<size_t>();
    Tensor t = Tensor::empty(shape, dt);
    if (e - b != t.nbytes() || base + e > bytes.size())
      throw IoError(fmt::format("tensor_file: {}: bad extent for '{}'", path, name));
    std::memcpy(t.raw_data(), bytes.data() + base + b, t.nbytes());
    out.insert(name, t);
  }
  return out;
}

}  // namespace cohort::parity
