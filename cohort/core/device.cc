#include "cohort/core/device.h"

#include <charconv>
#include <ostream>

#include "cohort/base/error.h"

namespace cohort {

const char* device_type_name(DeviceType type) { return type == DeviceType::kCUDA ? "cuda" : "cpu"; }

Device::Device(std::string_view spec) {
  auto bad = [&] {
    return InvalidArgument(fmt::format(
        "device '{}' is not understood: expected 'cpu', 'cuda' or 'cuda:N' (N >= 0)", spec));
  };
  if (spec == "cpu") return;
  if (!spec.starts_with("cuda")) throw bad();
  type_ = DeviceType::kCUDA;
  std::string_view rest = spec.substr(4);
  if (rest.empty()) return;
  if (rest.front() != ':' || rest.size() < 2) throw bad();
  int index = -1;
  auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), index);
  if (ec != std::errc() || end != rest.data() + rest.size() || index < 0 || index > 1023) {
    throw bad();
  }
  index_ = static_cast<int16_t>(index);
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return index_ < 0 ? std::string("cuda") : fmt::format("cuda:{}", index_);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace cohort
