// The tape: what each op saves, by op and by name, through the one save() call; identities that
// do not retain storage; gradients accumulated in tape order and freed once consumed.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "core/error.h"

using namespace remat;
namespace ag = remat::autograd;

TEST(Tape, ReportsSavedBytesPerOpAndPerNameAndRetainsNothingElse) {
  const int64_t N = 4, C = 8;
  Tensor w = Tensor::zeros({C, 2 * C}, Category::Parameter, "w"), b = Tensor::zeros({2 * C}, Category::Parameter, "b");
  Tensor g = Tensor::zeros({C}, Category::Parameter, "g"), bb = Tensor::zeros({C}, Category::Parameter, "bb");
  g.fill(1.0f);
  Tensor x = Tensor::zeros({N, C}, Category::Activation, "x");
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = float(i % 7) * 0.25f;
  ag::Tape tape;
  ag::Recorder r;
  r.tape = &tape;
  Allocator& a = Allocator::global();
  const size_t saved0 = a.active(Category::SavedActivation);
  Tensor y;
  {
    ag::RecordScope s(r);
    Tensor h = ag::layernorm(x, g, bb, "ln");    // saves x, ln.mean, ln.rstd
    Tensor d = ag::dropout(h, 0.5f, {1, 0}, "drop");  // saves nothing, keeps no reference to h
    y = ag::linear(d, w, b, "fc");                  // saves drop (its input)
  }
  auto by_op = tape.saved_by_op();
  EXPECT_EQ(by_op["ln"], size_t(N * C * 4 + 2 * N * 4));
  EXPECT_EQ(by_op.count("drop"), 0u);
  EXPECT_EQ(by_op["fc"], size_t(N * C * 4));
  auto by_name = tape.saved_by_name();
  EXPECT_EQ(by_name["x"], size_t(N * C * 4));
  EXPECT_EQ(by_name["ln.mean"], size_t(N * 4));
  EXPECT_EQ(by_name["drop"], size_t(N * C * 4));
  EXPECT_EQ(by_name.count("ln"), 0u) << "the layernorm output is nobody's saved input here";
  EXPECT_EQ(tape.saved_bytes(), size_t(2 * N * C * 4 + 2 * N * 4));
  // The accountant agrees: exactly these bytes moved to SavedActivation; the layernorm output
  // (consumed by dropout, which keeps only its identity) is already freed.
  EXPECT_EQ(a.active(Category::SavedActivation) - saved0, tape.saved_bytes());
  EXPECT_EQ(a.by_name()["ln"].active, 0u);

  ag::GradTable gt;
  Tensor dw = Tensor::zeros(w.shape(), Category::Gradient, "dw");
  gt.bind(w, dw);
  Tensor dy = Tensor::zeros(y.shape(), Category::ActivationGrad, "dy");
  dy.fill(1.0f);
  gt.bind(y, dy);
  const uint64_t yid = y.id();
  y = Tensor();
  tape.backward(gt);
  EXPECT_TRUE(tape.empty());
  // What remains saved is x alone: the caller still holds it (its category stays as it was saved).
  EXPECT_EQ(a.active(Category::SavedActivation), saved0 + x.bytes()) << "backward frees what the tape saved";
  EXPECT_EQ(gt.find_id(yid), nullptr) << "a consumed gradient is dropped";
  ASSERT_NE(gt.find(x), nullptr) << "the input's gradient is there for the caller";
  float s = 0;
  for (int64_t i = 0; i < dw.numel(); ++i) s += dw.data()[i];
  EXPECT_NE(s, 0.0f) << "the weight got its gradient";
}

TEST(Tape, NotRecordingSavesNothing) {
  Tensor x = Tensor::zeros({2, 4}, Category::Activation, "x");
  const size_t saved0 = Allocator::global().active(Category::SavedActivation);
  ag::Recorder r;  // no tape
  ag::RecordScope s(r);
  Tensor y = ag::gelu(x, "g");
  EXPECT_FALSE(ag::recording());
  EXPECT_EQ(Allocator::global().active(Category::SavedActivation), saved0);
  EXPECT_EQ(x.category(), Category::Activation);
}

TEST(Tape, ProfileKeysOpsByPlaceAndCountsForwardRecomputeAndBackward) {
  ag::OpProfile prof;
  EXPECT_EQ(prof.key("h.3.attn.c_attn", "linear"), "h.3.attn.c_attn [linear]") << "no naming: names stay whole";
  // The model supplies its naming (Model::split_name); here a stand-in that drops "h.<digits>.".
  prof.local = [](const std::string& n) { return n.rfind("h.", 0) == 0 ? n.substr(n.find('.', 2) + 1) : n; };
  EXPECT_EQ(prof.key("h.3.attn.c_attn", "linear"), "attn.c_attn [linear]");
  EXPECT_EQ(prof.key("ln_f", "layernorm"), "ln_f [layernorm]");

  const int64_t N = 4, C = 8, OC = 16;
  Tensor w = Tensor::zeros({C, OC}, Category::Parameter, "w"), b = Tensor::zeros({OC}, Category::Parameter, "b");
  Tensor x = Tensor::zeros({N, C}, Category::Activation, "x");
  ag::Tape tape;
  ag::Recorder r;
  r.tape = &tape;
  r.profile = &prof;
  prof.mark();
  Tensor y0, y1;
  {
    ag::RecordScope s(r);
    y0 = ag::linear(x, w, b, "h.0.fc");
    y1 = ag::linear(x, w, b, "h.1.fc");
    ag::Recorder rr = r;  // a replay outside the tape counts as recompute
    rr.tape = nullptr;
    rr.recompute = true;
    ag::RecordScope s2(rr);
    ag::linear(x, w, b, "h.1.fc");
  }
  ASSERT_EQ(prof.ops.size(), 1u);
  const auto& e = prof.ops.at("fc [linear]");
  EXPECT_EQ(e.calls, 2);
  EXPECT_EQ(e.fwd_flops, 2 * 2.0 * N * C * OC);
  EXPECT_EQ(e.rec_flops, 2.0 * N * C * OC);
  EXPECT_GT(e.fwd_s, 0.0) << "two linear forwards were timed";
  EXPECT_EQ(e.bwd_s, 0.0);

  ag::GradTable gt;
  Tensor dw = Tensor::zeros(w.shape(), Category::Gradient, "dw"), db = Tensor::zeros(b.shape(), Category::Gradient, "db");
  gt.bind(w, dw);
  gt.bind(b, db);
  gt.bind(y0, Tensor::zeros(y0.shape(), Category::ActivationGrad, "dy0"));
  gt.bind(y1, Tensor::zeros(y1.shape(), Category::ActivationGrad, "dy1"));
  {
    ag::RecordScope s(r);
    tape.backward(gt);
  }
  EXPECT_EQ(prof.ops.at("fc [linear]").bwd_flops, 2 * 4.0 * N * C * OC);
  EXPECT_GT(prof.ops.at("fc [linear]").bwd_s, 0.0);
}

// --determinism-check covers selective recomputation: a tensor the policy dropped is compared, when
// its recipe rebuilds it in backward, with the forward's own (a clone kept for the check), bit for
// bit; a rebuild that differs is named. Without the check nothing is cloned.
TEST(Tape, DeterminismCheckComparesSelectiveRebuilds) {
  struct DropY : ag::Policy {
    bool keep(const std::string& n) const override { return n != "y"; }
  } drop_y;
  struct TestNode : ag::Node {
    const char* op() const override { return "test"; }
    void backward(ag::GradTable&) override {}
  };
  for (const bool check : {false, true})
    for (const bool broken : {false, true}) {
      SCOPED_TRACE(std::string(check ? "checked" : "unchecked") + (broken ? ", broken rebuild" : ""));
      ag::Tape tape;
      ag::Recorder r;
      r.tape = &tape;
      r.policy = &drop_y;
      r.check_determinism = check;
      ag::RecordScope scope(r);
      Tensor x = Tensor::zeros({5}, Category::Activation, "x");
      for (int64_t i = 0; i < 5; ++i) x.data()[i] = float(i) * 0.5f;
      Tensor y = x.clone(Category::Activation, "y");
      ag::offer_recipe(y, {x}, [broken](const Tensors& in) {
        Tensor t = in[0].clone(Category::Recompute, "y");
        if (broken) t.data()[3] += 1.0f;
        return t;
      }, 5.0);
      TestNode node;
      node.name = "n";
      const size_t debug0 = Allocator::global().active(Category::Debug);
      const ag::Saved s = ag::save(node, "y", y);
      ASSERT_FALSE(s.kept()) << "the policy drops y: it is rebuilt";
      EXPECT_EQ(Allocator::global().active(Category::Debug) - debug0, check ? y.bytes() : 0u);
      if (!check || !broken) {
        EXPECT_NO_THROW(s.get());
        continue;
      }
      try {
        s.get();
        ADD_FAILURE() << "a rebuild that differs from the forward must be caught";
      } catch (const Error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("[determinism] rebuilt tensor 'y' (selective recomputation) differs from the original forward at "
                         "index 3: 2.500000 vs 1.500000"),
                  std::string::npos)
            << w;
      }
    }
}
