#include "cohort/parallel/parameter_server/tensor_message.h"

#include <gtest/gtest.h>

#include "cohort/core/random.h"

namespace cohort::parallel {
namespace {

bool same(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0);
}

TEST(TensorMessage, RoundTripsDtypesShapesAndEdgeCases) {
  Generator gen(3);
  std::vector<Tensor> ts = {
      rand({3, 4}, gen),
      rand({2, 3}, gen).to(kFloat64),
      randint(0, 100, {5}, gen),  // int64
      randint(0, 100, {2, 2}, gen).to(kInt32),
      randint(0, 255, {7}, gen).to(kUInt8),
      rand({4}, gen).to(kBFloat16),
      rand({2, 1, 3}, gen).to(kFloat16),
      Tensor::scalar(2.5),                // 0-d
      Tensor::zeros({0}),                 // zero elements
      Tensor::zeros({3, 0, 2}),           // zero elements, rank 3
      Tensor(),                           // undefined
      rand({4, 3}, gen).transpose(0, 1),  // not contiguous
  };
  TensorMessageWriter w;
  w.header().i64(42);
  w.add_all(ts);
  w.header().str("tail");
  rpc::Message m = w.finish();
  EXPECT_EQ(m.num_buffers(), ts.size() - 1);  // the undefined one has none

  TensorMessageReader r(m, "test message");
  EXPECT_EQ(r.header().i64(), 42);
  auto back = r.next_all(ts.size());
  EXPECT_EQ(r.header().str(), "tail");
  r.expect_end();
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_TRUE(same(back[i], ts[i])) << "tensor " << i;
}

TEST(TensorMessage, ContiguousTensorsAreBorrowedNotCopied) {
  Tensor t = Tensor::ones({1000});
  TensorMessageWriter w;
  w.add(t);
  rpc::Message m = w.finish();
  EXPECT_EQ(static_cast<const void*>(m.buffer(0).data()), t.raw_data());
  // The message keeps the storage alive on its own.
  const void* where = t.raw_data();
  t = Tensor();
  EXPECT_EQ(static_cast<const void*>(m.buffer(0).data()), where);
  TensorMessageReader r(m, "borrowed");
  EXPECT_EQ(r.next().to_vector<float>()[999], 1.0f);
}

TEST(TensorMessage, NextIntoCopiesIntoTheDestinationAndChecksIt) {
  TensorDict d;
  d.insert("a", Tensor::full({2, 2}, 3.0));
  d.insert("b", Tensor::zeros({0}));
  TensorMessageWriter w;
  w.add_dict(d);
  rpc::Message m = w.finish();
  {
    TensorMessageReader r(m, "dict");
    TensorDict back = r.next_dict();
    r.expect_end();
    ASSERT_EQ(back.size(), 2u);
    EXPECT_TRUE(same(back.at("a"), d.at("a")));
    EXPECT_TRUE(same(back.at("b"), d.at("b")));
  }
  {
    TensorMessageReader r(m, "dict");
    r.header().u32();
    r.header().str();
    Tensor dst = Tensor::zeros({2, 2});
    const uint64_t v = dst.storage()->version();
    r.next_into(dst, "a");
    EXPECT_EQ(dst.to_vector<float>(), std::vector<float>(4, 3.0f));
    EXPECT_GT(dst.storage()->version(), v);
  }
  {
    TensorMessageReader r(m, "dict");
    r.header().u32();
    r.header().str();
    Tensor wrong = Tensor::zeros({4});
    try {
      r.next_into(wrong, "a");
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'a' arrived as float32 [2, 2]"), std::string::npos)
          << e.what();
    }
  }
}

TEST(TensorMessage, MalformedMessagesThrowNamingTheMessage) {
  TensorMessageWriter w;
  w.add(Tensor::ones({4}));
  rpc::Message m = w.finish();
  // Header claims 4 floats, buffer has 3.
  rpc::Message short_buffer(m.header());
  short_buffer.add_copy(m.buffer(0).data(), 12);
  TensorMessageReader r1(short_buffer, "ps.push");
  EXPECT_THROW(r1.next(), InvalidArgument);
  // No buffer at all.
  rpc::Message no_buffer(m.header());
  TensorMessageReader r2(no_buffer, "ps.push");
  EXPECT_THROW(r2.next(), InvalidArgument);
  // Truncated header.
  rpc::Message truncated(m.header().substr(0, 3));
  TensorMessageReader r3(truncated, "ps.push");
  try {
    r3.next();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ps.push: truncated"), std::string::npos) << e.what();
  }
  // Unread bytes are reported.
  TensorMessageReader r4(m, "ps.push");
  EXPECT_THROW(r4.expect_end(), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
