// Typed child members (nn::Child<M>) and the checked child<M>(slot).
#include "cohort/nn/child.h"

#include <gtest/gtest.h>

#include "cohort/nn/nn.h"
#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

// A user's module written as in LibTorch: typed members for its layers.
class TwoLayer : public Cloneable<TwoLayer> {
 public:
  explicit TwoLayer(Generator& gen) : Cloneable("TwoLayer") {
    fc_ = register_module("fc", std::make_shared<Linear>(4, 3, gen));
    bn_ = register_module("bn", std::make_shared<BatchNorm1d>(3));
  }
  Tensor forward(const Tensor& x) override { return bn_(fc_(x)); }
  Linear& fc() const { return *fc_; }
  BatchNorm1d& bn() const { return *bn_; }
  const Child<Linear>& fc_member() const { return fc_; }

 private:
  Child<Linear> fc_;
  Child<BatchNorm1d> bn_;
};

Tensor input() {
  std::vector<float> v(8 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  return Tensor::from_vector(v, {8, 4});
}

TEST(Child, MembersReachTheRegisteredLayers) {
  Generator gen(3);
  TwoLayer m(gen);
  EXPECT_EQ(&m.fc(), m.child("fc").get());
  EXPECT_EQ(&m.bn(), m.child("bn").get());
  EXPECT_EQ(m.forward(input()).sizes(), (Shape{8, 3}));
}

TEST(Child, CloneRepointsMembersAtTheClonedLayers) {
  Generator gen(3);
  TwoLayer m(gen);
  auto c = m.clone_as<TwoLayer>();
  EXPECT_EQ(&c->fc(), c->child("fc").get());
  EXPECT_NE(&c->fc(), &m.fc());
  EXPECT_NE(c->fc().weight().data_ptr<float>(), m.fc().weight().data_ptr<float>());
  Tensor before = c->forward(input()).detach().clone();
  // Changing the original changes neither the clone's members nor its output.
  {
    NoGradGuard no_grad;
    m.fc().weight().fill_(0.0);
  }
  EXPECT_EQ(c->forward(input()).to_vector<float>(), before.to_vector<float>());
}

TEST(Child, ReplicaMembersShareParametersButNotBuffers) {
  Generator gen(3);
  TwoLayer m(gen);
  auto r = std::static_pointer_cast<TwoLayer>(m.replicate());
  EXPECT_EQ(&r->fc(), r->child("fc").get());
  EXPECT_NE(&r->fc(), &m.fc());
  EXPECT_EQ(r->fc().weight().data_ptr<float>(), m.fc().weight().data_ptr<float>());
  r->forward(input());  // training mode: updates the replica's running stats only
  EXPECT_NE(r->bn().buffer("running_mean").to_vector<float>(),
            m.bn().buffer("running_mean").to_vector<float>());
  // Gradients through the replica's members reach the original's parameters.
  sum(r->forward(input())).backward();
  EXPECT_TRUE(m.fc().weight().grad().defined());
}

// A user-written copy constructor that assigns its members in its body (and
// copies a temporary on the way) is re-pointed like the implicit one.
class AssignedCopy : public Cloneable<AssignedCopy> {
 public:
  explicit AssignedCopy(Generator& gen) : Cloneable("AssignedCopy") {
    fc_ = register_module("fc", std::make_shared<Linear>(4, 3, gen));
  }
  AssignedCopy(const AssignedCopy& other) : Cloneable(other) {
    Child<Linear> scratch = other.fc_;  // destroyed before the copy is re-pointed
    fc_ = scratch;
  }
  Tensor forward(const Tensor& x) override { return fc_(x); }
  Linear& fc() const { return *fc_; }

 private:
  Child<Linear> fc_;
};

TEST(Child, MembersAssignedByACopyConstructorAreRepointed) {
  Generator gen(3);
  AssignedCopy m(gen);
  auto c = m.clone_as<AssignedCopy>();
  EXPECT_EQ(&c->fc(), c->child("fc").get());
  EXPECT_NE(&c->fc(), &m.fc());
  auto r = std::static_pointer_cast<AssignedCopy>(m.replicate());
  EXPECT_EQ(&r->fc(), r->child("fc").get());
  EXPECT_EQ(r->fc().weight().data_ptr<float>(), m.fc().weight().data_ptr<float>());
}

TEST(Child, SlotAccessIsCheckedAgainstTheType) {
  Generator gen(3);
  class Probe : public Cloneable<Probe> {
   public:
    explicit Probe(Generator& gen) : Cloneable("Probe") {
      register_module("fc", std::make_shared<Linear>(2, 2, gen));
    }
    Linear& as_linear() const { return child<Linear>(0); }
    BatchNorm1d& as_batch_norm() const { return child<BatchNorm1d>(0); }
    Module& missing() const { return child<Module>(1); }
  };
  Probe p(gen);
  EXPECT_EQ(p.as_linear().type_name(), "Linear");
  expect_error<InvalidArgument>([&] { p.as_batch_norm(); },
                                {"Probe", "'fc'", "Linear", "cohort::nn::BatchNorm1d"});
  expect_error<InvalidArgument>([&] { p.missing(); }, {"Probe", "slot 1"});
}

TEST(Child, UnsetOrForeignMembersAreErrors) {
  Child<Linear> unset;
  EXPECT_FALSE(unset);
  expect_error<InvalidArgument>([&] { unset->forward(input()); }, {"register_module"});

  Generator gen(3);
  // A member holding a layer registered in another module would keep
  // pointing into that module after a copy: clone() and replicate() refuse.
  class Borrower : public Cloneable<Borrower> {
   public:
    Borrower(Generator& gen, Child<Linear> borrowed)
        : Cloneable("Borrower"), borrowed_(std::move(borrowed)) {
      own_ = register_module("own", std::make_shared<Linear>(2, 2, gen));
    }

   private:
    Child<Linear> own_, borrowed_, unset_;
  };
  TwoLayer lender(gen);
  Borrower b(gen, lender.fc_member());
  expect_error<InvalidArgument>([&] { b.clone(); },
                                {"Borrower", "Linear", "not a registered child"});
  expect_error<InvalidArgument>([&] { b.replicate(); }, {"not a registered child"});
  Borrower fine(gen, nullptr);
  EXPECT_NO_THROW(fine.clone());  // unset members are left unset
}

}  // namespace
}  // namespace cohort::nn
