// Tensors in rpc::Message: the serializer the rpc layer leaves to the layers
// that know Tensor (cohort/rpc/message.h). A tensor is one entry in the
// message header -- defined flag, dtype, rank, sizes -- plus one payload
// buffer with its raw bytes (row-major, host byte order).
//
// Sending is zero-copy: a contiguous tensor's bytes are borrowed straight
// from its storage, which the message keeps alive until the bytes are on the
// wire (a non-contiguous tensor is made contiguous first, once). The caller
// must not write to a tensor while a message borrowing it may still be
// sending (the parameter-server client waits for the replies before the next
// backward touches the gradients).
//
// Receiving copies once: a Storage owns its bytes and cannot alias a received
// buffer, so next() returns a fresh tensor with one memcpy, and next_into()
// copies straight into an existing tensor (how a pull lands in the model's
// parameters without any temporary).
//
// An undefined tensor (Tensor()) travels as a flag without a buffer; zero-size
// tensors carry a zero-byte buffer. Malformed messages (wrong counts, sizes
// that do not match the bytes, unknown dtypes) throw InvalidArgument naming
// the message (`what`) and the entry.
// Thread safety: one thread per writer/reader object.
#pragma once

#include <string>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/core/tensor_dict.h"
#include "cohort/parallel/parameter_server/wire_format.h"
#include "cohort/rpc/message.h"

namespace cohort::parallel {

class TensorMessageWriter {
 public:
  // Header fields of the caller's own go through header(), in any order with add().
  WireWriter& header() { return header_; }
  void add(const Tensor& t);
  void add_all(const std::vector<Tensor>& ts);
  // Names and tensors, in the dict's order.
  void add_dict(const TensorDict& dict);
  // The message; the writer is empty afterwards.
  rpc::Message finish();

 private:
  WireWriter header_;
  rpc::Message message_;
};

class TensorMessageReader {
 public:
  // Reads `message`, which must outlive the reader. `what` names it in errors.
  TensorMessageReader(const rpc::Message& message, std::string what);
  WireReader& header() { return header_; }
  // The next tensor, as a new tensor (undefined when one was sent undefined).
  Tensor next();
  // Copies the next tensor into dst, which must have its dtype and shape
  // (InvalidArgument naming `name` otherwise). An undefined one zeroes dst.
  void next_into(Tensor& dst, const std::string& name);
  std::vector<Tensor> next_all(size_t n);
  TensorDict next_dict();
  // Throws unless the header and the buffers were all read.
  void expect_end() const;

 private:
  struct Meta {
    bool defined = false;
    DType dtype = DType::kFloat32;
    Shape sizes;
  };
  Meta next_meta();
  const rpc::Message& message_;
  WireReader header_;
  size_t buffer_ = 0;
};

}  // namespace cohort::parallel
