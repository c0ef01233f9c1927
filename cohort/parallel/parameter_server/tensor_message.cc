#include "cohort/parallel/parameter_server/tensor_message.h"

#include <fmt/format.h>

#include <cstring>

#include "cohort/base/error.h"

namespace cohort::parallel {

namespace {

constexpr uint8_t kMaxDType = static_cast<uint8_t>(DType::kFloat16);
constexpr uint32_t kMaxDims = 64;

}  // namespace

void TensorMessageWriter::add(const Tensor& t) {
  if (!t.defined()) {
    header_.u8(0);
    return;
  }
  header_.u8(1);
  header_.u8(static_cast<uint8_t>(t.dtype()));
  header_.u32(static_cast<uint32_t>(t.dim()));
  for (int64_t s : t.sizes()) header_.i64(s);
  // A contiguous tensor is sent from where it lives; its storage keeps the
  // bytes alive until they are on the wire.
  Tensor c = t.contiguous();
  std::shared_ptr<const void> keepalive = c.storage();
  message_.add_buffer(c.nbytes() == 0 ? nullptr : c.raw_data(), c.nbytes(), std::move(keepalive));
}

void TensorMessageWriter::add_all(const std::vector<Tensor>& ts) {
  header_.u32(static_cast<uint32_t>(ts.size()));
  for (const auto& t : ts) add(t);
}

void TensorMessageWriter::add_dict(const TensorDict& dict) {
  header_.u32(static_cast<uint32_t>(dict.size()));
  for (const auto& [name, t] : dict) {
    header_.str(name);
    add(t);
  }
}

rpc::Message TensorMessageWriter::finish() {
  message_.set_header(header_.take());
  rpc::Message m = std::move(message_);
  message_ = rpc::Message();
  header_ = WireWriter();
  return m;
}

TensorMessageReader::TensorMessageReader(const rpc::Message& message, std::string what)
    : message_(message), header_(message.header(), std::move(what)) {}

TensorMessageReader::Meta TensorMessageReader::next_meta() {
  Meta m;
  m.defined = header_.u8() != 0;
  if (!m.defined) return m;
  const uint8_t dt = header_.u8();
  if (dt > kMaxDType)
    throw InvalidArgument(
        fmt::format("{}: tensor {} has unknown dtype code {}", header_.what(), buffer_, dt));
  m.dtype = static_cast<DType>(dt);
  const uint32_t ndim = header_.u32();
  if (ndim > kMaxDims)
    throw InvalidArgument(
        fmt::format("{}: tensor {} claims {} dimensions", header_.what(), buffer_, ndim));
  m.sizes.resize(ndim);
  for (auto& s : m.sizes) {
    s = header_.i64();
    if (s < 0)
      throw InvalidArgument(
          fmt::format("{}: tensor {} has a negative size {}", header_.what(), buffer_, s));
  }
  if (buffer_ >= message_.num_buffers())
    throw InvalidArgument(fmt::format("{}: tensor {} has no buffer (the message has {})",
                                      header_.what(), buffer_, message_.num_buffers()));
  const size_t want = static_cast<size_t>(shape_numel(m.sizes)) * dtype_size(m.dtype);
  if (message_.buffer(buffer_).size() != want)
    throw InvalidArgument(fmt::format("{}: tensor {} ({} {}) needs {} bytes, its buffer has {}",
                                      header_.what(), buffer_, dtype_name(m.dtype),
                                      shape_str(m.sizes), want, message_.buffer(buffer_).size()));
  return m;
}

Tensor TensorMessageReader::next() {
  Meta m = next_meta();
  if (!m.defined) return Tensor();
  Tensor t = Tensor::empty(m.sizes, m.dtype);
  auto bytes = message_.buffer(buffer_++);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

void TensorMessageReader::next_into(Tensor& dst, const std::string& name) {
  Meta m = next_meta();
  if (!m.defined) {
    dst.zero_();
    return;
  }
  COHORT_CHECK(m.dtype == dst.dtype() && m.sizes == dst.sizes(),
               "{}: '{}' arrived as {} {}, expected {} {}", header_.what(), name,
               dtype_name(m.dtype), shape_str(m.sizes), dtype_name(dst.dtype()),
               shape_str(dst.sizes()));
  auto bytes = message_.buffer(buffer_++);
  if (dst.is_contiguous()) {
    if (!bytes.empty()) std::memcpy(dst.raw_data(), bytes.data(), bytes.size());
    // Raw writes are not counted by the storage's version (storage.h); bump
    // it as copy_ would, so autograd sees the parameter changed.
    dst.storage()->bump_version();
  } else {
    Tensor tmp = Tensor::empty(m.sizes, m.dtype);
    if (!bytes.empty()) std::memcpy(tmp.raw_data(), bytes.data(), bytes.size());
    dst.copy_(tmp);
  }
}

std::vector<Tensor> TensorMessageReader::next_all(size_t n) {
  const uint32_t count = header_.u32();
  if (count != n)
    throw InvalidArgument(
        fmt::format("{}: {} tensors where {} were expected", header_.what(), count, n));
  std::vector<Tensor> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(next());
  return out;
}

TensorDict TensorMessageReader::next_dict() {
  const uint32_t count = header_.u32();
  TensorDict d;
  for (uint32_t i = 0; i < count; ++i) {
    std::string name = header_.str();
    d.insert(std::move(name), next());
  }
  return d;
}

void TensorMessageReader::expect_end() const {
  header_.expect_end();
  if (buffer_ != message_.num_buffers())
    throw InvalidArgument(fmt::format("{}: {} buffers, {} were read", header_.what(),
                                      message_.num_buffers(), buffer_));
}

}  // namespace cohort::parallel
