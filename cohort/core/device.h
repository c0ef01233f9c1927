// Device: where a tensor's bytes live, as torch.device: `cpu` or `cuda:N`.
// The CUDA code itself is in the optional cohort/cuda layer; core only names
// devices, so that a tensor, a module or a checkpoint can say where it is
// without any CUDA header (docs/design.md, "GPUs").
// A Device is a small value type, thread safe to copy and compare.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace cohort {

enum class DeviceType : int8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kDeviceTypes = 2;

const char* device_type_name(DeviceType type);  // "cpu", "cuda"

class Device {
 public:
  // The CPU.
  constexpr Device() = default;
  // index -1 means the current device of that type (resolved by the device
  // runtime when memory is allocated); the CPU's index is always -1.
  constexpr Device(DeviceType type, int index = -1)
      : type_(type), index_(static_cast<int16_t>(type == DeviceType::kCPU ? -1 : index)) {}
  // "cpu", "cuda", "cuda:1" (torch.device's spellings); throws InvalidArgument
  // naming the accepted forms otherwise.
  explicit Device(std::string_view spec);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool has_index() const { return index_ >= 0; }
  bool is_cpu() const { return type_ == DeviceType::kCPU; }
  bool is_cuda() const { return type_ == DeviceType::kCUDA; }
  std::string str() const;  // "cpu", "cuda", "cuda:0"

  friend bool operator==(const Device& a, const Device& b) = default;

 private:
  DeviceType type_ = DeviceType::kCPU;
  int16_t index_ = -1;
};

inline constexpr Device kCPU{};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace cohort
