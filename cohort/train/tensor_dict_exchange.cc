#include "cohort/train/tensor_dict_exchange.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

using distributed::DataType;

constexpr uint32_t kTag = 0x7d1c7;  // apart from the tags other traffic on the group uses

struct Encoded {
  std::string header;            // JSON: names, dtypes, shapes
  std::vector<uint8_t> payload;  // the tensors' bytes, in order
};

Encoded encode(const TensorDict& dict) {
  nlohmann::json entries = nlohmann::json::array();
  size_t bytes = 0;
  for (const auto& [name, t] : dict) bytes += t.nbytes();
  Encoded e;
  e.payload.resize(bytes);
  size_t at = 0;
  for (const auto& [name, t] : dict) {
    Tensor c = t.contiguous();
    entries.push_back(
        {{"name", name}, {"dtype", static_cast<int>(c.dtype())}, {"shape", c.sizes()}});
    if (c.nbytes() > 0) std::memcpy(e.payload.data() + at, c.raw_data(), c.nbytes());
    at += c.nbytes();
  }
  e.header = entries.dump();
  return e;
}

TensorDict decode(const std::string& header, const std::vector<uint8_t>& payload, int from) {
  TensorDict dict;
  size_t at = 0;
  for (const auto& entry : nlohmann::json::parse(header)) {
    Tensor t = Tensor::empty(entry.at("shape").get<std::vector<int64_t>>(),
                             static_cast<DType>(entry.at("dtype").get<int>()));
    COHORT_CHECK(at + t.nbytes() <= payload.size(),
                 "gather_tensor_dicts: rank {}'s dict is shorter than its header says", from);
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), payload.data() + at, t.nbytes());
    at += t.nbytes();
    dict.insert(entry.at("name").get<std::string>(), t);
  }
  return dict;
}

}  // namespace

std::vector<TensorDict> gather_tensor_dicts(distributed::ProcessGroup& pg, const TensorDict& dict,
                                            int root) {
  const distributed::SendOptions send{.tag = kTag};
  const distributed::RecvOptions recv{.tag = kTag};
  if (pg.rank() != root) {
    Encoded e = encode(dict);
    int64_t sizes[2] = {static_cast<int64_t>(e.header.size()),
                        static_cast<int64_t>(e.payload.size())};
    pg.send(sizes, 2, DataType::kInt64, root, send);
    // Empty parts are not sent: both sides know the sizes.
    if (!e.header.empty()) pg.send(e.header.data(), e.header.size(), DataType::kUInt8, root, send);
    if (!e.payload.empty())
      pg.send(e.payload.data(), e.payload.size(), DataType::kUInt8, root, send);
    return {};
  }
  std::vector<TensorDict> all(static_cast<size_t>(pg.size()));
  for (int r = 0; r < pg.size(); ++r) {
    if (r == root) {
      all[static_cast<size_t>(r)] = dict;
      continue;
    }
    int64_t sizes[2] = {0, 0};
    pg.recv(sizes, 2, DataType::kInt64, r, recv);
    std::string header(static_cast<size_t>(sizes[0]), '\0');
    std::vector<uint8_t> payload(static_cast<size_t>(sizes[1]));
    if (!header.empty()) pg.recv(header.data(), header.size(), DataType::kUInt8, r, recv);
    if (!payload.empty()) pg.recv(payload.data(), payload.size(), DataType::kUInt8, r, recv);
    all[static_cast<size_t>(r)] = decode(header, payload, r);
  }
  return all;
}

}  // namespace cohort::train
