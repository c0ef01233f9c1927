#include "cohort/train/run_trace.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "cohort/train/tensor_dict_exchange.h"

namespace cohort::train {

void write_run_trace(const Tracer& tracer, distributed::ProcessGroup* world,
                     const std::string& path) {
  std::string events = tracer.events_json();
  if (world == nullptr || world->size() == 1) {
    Tracer::write_document(path, {events});
    return;
  }
  Tensor bytes = Tensor::empty({static_cast<int64_t>(events.size())}, DType::kUInt8);
  if (!events.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), events.data(), events.size());
  TensorDict mine;
  mine.insert("trace", bytes);
  std::vector<TensorDict> all = gather_tensor_dicts(*world, mine, 0);
  if (world->rank() != 0) return;
  std::vector<std::string> lists;
  lists.reserve(all.size());
  for (const TensorDict& d : all) {
    const Tensor& t = d.at("trace");
    lists.emplace_back(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()),
                       static_cast<size_t>(t.numel()));
  }
  Tracer::write_document(path, lists);
}

std::string trace_part_path(const std::string& path, int rank) {
  return fmt::format("{}.rank{}.json", path, rank);
}

}  // namespace cohort::train
