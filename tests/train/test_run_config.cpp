// The run's typed values and their one codec each (core/record.h): the model config, the run
// (RunConfig: a checkpoint's state.json), the plan (PlanSpec: a plan file) and the calibration.
//  - Every member of each record is listed (the aggregate's member count equals the listed fields):
//    a member added without a codec entry fails here.
//  - Every field set to a non-default value, written and read back, compares equal as a struct (the
//    defaulted operator== compares every member, listed or not).
//  - Per field of the run: a checkpoint and a plan file carry that field alone, and the difference
//    between the default run and the one read back names exactly that field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>

#include "core/record.h"
#include "planner/calibration.h"
#include "test_util.h"
#include "planner/budget.h"
#include "train/run_state.h"
#include "train/trainer.h"

using namespace remat;

namespace {

// Sets every field of `x` to a value other than its default, through the record's own list: each
// integer +3, each real +0.25, each bool flipped, each string suffixed, each enum to another name,
// each vector given one perturbed element, each optional a perturbed value, nested records alike.
template <class T>
void perturb(T& x) {
  if constexpr (record::Record<T>) {
    T::fields(x, [](const char*, auto& f) { perturb(f); });
  } else if constexpr (std::is_same_v<T, Action>) {
    x = Action{Action::Kind::Backward, 3, Keep::Nothing, false};
  } else if constexpr (record::NamedEnum<T>) {
    for (const auto& [v, n] : record::EnumNames<T>::values)
      if (v != x) {
        x = v;
        break;
      }
  } else if constexpr (requires { typename T::value_type; x.has_value(); }) {  // optional
    typename T::value_type v{};
    perturb(v);
    x = v;
  } else if constexpr (requires { x.push_back(typename T::value_type{}); } && !std::is_same_v<T, std::string>) {
    typename T::value_type v{};
    perturb(v);
    x.push_back(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    x = !x;
  } else if constexpr (std::is_same_v<T, std::string>) {
    x += "x";
  } else if constexpr (std::is_integral_v<T>) {
    x = T(x + 3);
  } else {
    x = T(x + 0.25);
  }
}

// Every listed field of `a` differs from the default's.
template <class R>
std::vector<std::string> fields_at_default(const R& a) {
  std::vector<std::string> same;
  const R d{};
  std::vector<nlohmann::json> defaults;
  R::fields(d, [&](const char*, const auto& f) { defaults.push_back(record::to_json(f)); });
  size_t i = 0;
  R::fields(a, [&](const char* key, const auto& f) {
    if (record::to_json(f) == defaults[i++]) same.push_back(key);
  });
  return same;
}

template <class R>
void expect_complete_round_trip() {
  EXPECT_EQ(record::listed_fields<R>(), record::field_count<R>())
      << "a member of the record is not listed in its fields(): it would never reach a file";
  R a{};
  perturb(a);
  EXPECT_EQ(fields_at_default(a), std::vector<std::string>{}) << "perturb left these at their defaults";
  EXPECT_FALSE(a == R{});
  R b{};
  record::from_json(nlohmann::json::parse(record::to_json(a).dump()), b);
  EXPECT_TRUE(a == b) << "read back differently: " << record::describe(record::diff(a, b), "written", "read");
  EXPECT_TRUE(record::diff(a, b).empty());
}

TEST(RunRecords, EveryFieldIsListedAndRoundTripsAsAStruct) {
  {
    SCOPED_TRACE("ModelConfig");
    expect_complete_round_trip<ModelConfig>();
  }
  {
    SCOPED_TRACE("RunConfig");
    expect_complete_round_trip<RunConfig>();
  }
  {
    SCOPED_TRACE("PlanSpec");
    expect_complete_round_trip<PlanSpec>();
  }
  {
    SCOPED_TRACE("Calibration");
    expect_complete_round_trip<planner::Calibration>();
  }
  {
    SCOPED_TRACE("Calibration::PolicyCosts");
    expect_complete_round_trip<planner::Calibration::PolicyCosts>();
  }
  {
    SCOPED_TRACE("CheckpointIdentity");
    expect_complete_round_trip<CheckpointIdentity>();
  }
  {
    SCOPED_TRACE("Fingerprint");
    expect_complete_round_trip<Fingerprint>();
  }
}

// The guard itself: a record with a member its fields() does not list is caught by the count, and a
// field that is never written comes back at its default, which the struct comparison sees.
struct Incomplete {
  int64_t listed = 0;
  int64_t forgotten = 0;
  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("listed", s.listed);
  }
  bool operator==(const Incomplete&) const = default;
};
TEST(RunRecords, AnUnlistedMemberIsCaught) {
  EXPECT_NE(record::listed_fields<Incomplete>(), record::field_count<Incomplete>());
  Incomplete a{1, 2}, b{};
  record::from_json(record::to_json(a), b);
  EXPECT_FALSE(a == b);
}

TEST(RunRecords, DecodingNamesTheFieldThatIsWrong) {
  auto error = [](nlohmann::json j) {
    RunConfig r;
    try {
      record::from_json(j, r);
    } catch (const record::FieldError& e) {
      return e.path + ": " + e.what();
    }
    return std::string("accepted");
  };
  const nlohmann::json good = record::to_json(RunConfig{});
  EXPECT_EQ(error(good), "accepted");
  nlohmann::json j = good;
  j["model"]["precision"] = "fp16";
  EXPECT_EQ(error(j), "model.precision: must be one of f32, bf16, got \"fp16\"");
  j = good;
  j.erase("lr_decay_steps");
  EXPECT_EQ(error(j), "lr_decay_steps: is missing");
  j = good;
  j["schedule"] = {"f0c", "q1"};
  EXPECT_NE(error(j).find("schedule[1]: "), std::string::npos) << error(j);
  j = good;
  j["block_attention"] = {"naive", 3};
  EXPECT_EQ(error(j), "block_attention[1]: must be one of naive, flash, got 3");
  j = good;
  j["steps"] = 1.5;
  EXPECT_EQ(error(j), "steps: must be an integer, got 1.5");
  j = good;
  j["seed"] = -1;
  EXPECT_EQ(error(j), "seed: must be a non-negative integer, got -1");
  j = good;
  j["lr"] = "fast";
  EXPECT_EQ(error(j), "lr: must be a finite number, got \"fast\"");
  j = good;
  j["colour"] = "blue";
  EXPECT_EQ(error(j), "colour: is not a field this remat knows");
}

// A valid model with every field away from its default (a LLaMA in bf16 with an fp32 residual
// stream, flash attention, dropout, grouped-query heads, its own hidden size, theta and epsilon).
ModelConfig rich_model() {
  ModelConfig m;
  m.arch = Arch::Llama;
  m.L = 3;
  m.C = 64;
  m.NH = 8;
  m.KVH = 2;
  m.T = 32;
  m.V = 300;
  m.hidden = 96;
  m.rope_theta = 500000.0f;
  m.norm_eps = 1e-6f;
  m.dropout = 0.1f;
  m.attention = autograd::AttentionKind::Flash;
  m.precision = DType::BF16;
  m.fp32_residual = true;
  m.validate();
  return m;
}

// A valid run with every field away from its default.
RunConfig rich_run() {
  RunConfig r;
  r.model = rich_model();
  r.data = "/data/train.bin";
  r.data_format = "u16";
  r.val_data = "/data/val.bin";
  r.val_fraction = 0.25;
  r.random_tokens = 5000;
  r.tokenizer = "/models/gpt2";
  r.steps = 40;
  r.batch = 6;
  r.micro_batch = 3;
  r.seq = 24;
  r.lr = 3e-4f;
  r.min_lr_ratio = 0.05f;
  r.weight_decay = 0.01f;
  r.beta1 = 0.8f;
  r.beta2 = 0.99f;
  r.eps = 1e-6f;
  r.warmup = 5;
  r.lr_decay_steps = 30;
  r.clip = 0.5f;
  r.seed = 99;
  r.recompute = "uniform:2";
  r.policy = "swiglu";
  r.save_only = "attn.probs";
  r.save_all_but = "mlp.act";
  r.recompute_last = true;
  r.replay_internals = true;
  r.schedule = make_schedule(parse_strategy("block", 3, false), 3);
  r.block_policy = {"none", "swiglu", "norms"};
  r.block_attention = {autograd::AttentionKind::Naive, autograd::AttentionKind::Flash, autograd::AttentionKind::Naive};
  r.ranks = 2;
  r.zero = 1;
  r.save_every = 10;
  r.keep = 4;
  return r;
}

class RunFields : public remat::testing_util::TempDirTest, public ::testing::WithParamInterface<std::string> {};

std::vector<std::string> run_field_names() {
  std::vector<std::string> n;
  RunConfig r;
  RunConfig::fields(r, [&](const char* key, auto&) { n.push_back(key); });
  return n;
}

// The run with field `name` alone taken from `from`.
RunConfig with_field(const std::string& name, const RunConfig& from) {
  RunConfig r;
  std::vector<nlohmann::json> values;
  RunConfig::fields(from, [&](const char*, const auto& f) { values.push_back(record::to_json(f)); });
  size_t i = 0;
  RunConfig::fields(r, [&](const char* key, auto& f) {
    if (key == name) record::from_json(values[i], f);
    ++i;
  });
  return r;
}

// Each field of the run, alone, through a checkpoint's state.json.
TEST_P(RunFields, ThroughACheckpoint) {
  const RunConfig rich = rich_run();
  EXPECT_EQ(fields_at_default(rich), std::vector<std::string>{}) << "rich_run() leaves these at their defaults";
  EXPECT_EQ(fields_at_default(rich.model), std::vector<std::string>{}) << "rich_model() leaves these at their defaults";
  const RunConfig r = with_field(GetParam(), rich);
  const nlohmann::json state = nlohmann::json::parse(run_config_json(r).dump());
  const RunConfig back = run_config_from_json(state, kCheckpointVersion, "state.json");
  EXPECT_TRUE(back == r) << record::describe(record::diff(r, back), "written", "read");
  const auto d = record::diff(RunConfig{}, back);
  ASSERT_FALSE(d.empty());
  for (const auto& x : d) EXPECT_EQ(x.path.substr(0, GetParam().size()), GetParam()) << x.path;
}

// Each field a plan carries (model, batch, micro-batch, seq, the calibration's thread count, schedule,
// policies and kernels per block), alone, through a plan file and apply_plan into the run, then
// through a checkpoint.
class PlanFields : public remat::testing_util::TempDirTest, public ::testing::WithParamInterface<std::string> {};

std::vector<std::string> plan_field_names() {
  std::vector<std::string> n;
  PlanSpec p;
  PlanSpec::fields(p, [&](const char* key, auto&) { n.push_back(key); });
  return n;
}

TEST_P(PlanFields, ThroughAPlanFileIntoTheRun) {
  const RunConfig rich = rich_run();
  const std::string name = GetParam();
  StepPlan plan;
  plan.cfg = ModelConfig{};
  plan.cfg.L = 3;
  plan.batch = 8;
  plan.micro = 8;
  plan.T = plan.cfg.T;
  plan.schedule = make_schedule(parse_strategy("none", 3, false), 3);
  plan.block_policy = {"none", "none", "none"};
  if (name == "model") plan.cfg = rich.model, plan.T = rich.model.T;
  else if (name == "batch") plan.batch = rich.batch, plan.micro = rich.batch;
  else if (name == "micro_batch") plan.micro = 4;
  else if (name == "seq") plan.T = 24;
  else if (name == "schedule") plan.schedule = *rich.schedule;
  else if (name == "block_policy") plan.block_policy = {"none", "selective", "gelu"};
  else if (name == "block_attention") plan.block_attention = rich.block_attention;
  else if (name == "threads") plan.threads = 1;  // not the run's: check_plan_target compares it with the process's
  else FAIL() << "a plan field this test does not know: " << name;
  if (name == "model") plan.block_policy = {"none", "swiglu", "none"};
  write_plan_file(p("plan.json"), plan);
  const StepPlan back = read_plan_file(p("plan.json"));
  EXPECT_TRUE(static_cast<const PlanSpec&>(back) == static_cast<const PlanSpec&>(plan))
      << record::describe(record::diff(static_cast<const PlanSpec&>(plan), static_cast<const PlanSpec&>(back)), "written", "read");
  RunConfig run;
  RunConfig base = run;
  apply_plan(back, run);
  apply_plan(plan, base);
  EXPECT_TRUE(run == base);
  const RunConfig resumed = run_config_from_json(nlohmann::json::parse(run_config_json(run).dump()), kCheckpointVersion, "s");
  EXPECT_TRUE(resumed == run) << record::describe(record::diff(run, resumed), "written", "read");
}

INSTANTIATE_TEST_SUITE_P(EachField, RunFields, ::testing::ValuesIn(run_field_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(EachField, PlanFields, ::testing::ValuesIn(plan_field_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Version 1 checkpoints (no precision, decay length or per-block plan) still load; what they did not
// record is listed, for the command line to supply.
TEST(RunRecords, Version1CheckpointsLoad) {
  nlohmann::json j = run_config_json(rich_run());
  for (const char* k : {"lr_decay_steps", "schedule", "block_policy", "block_attention"}) j.erase(k);
  j["model"].erase("precision");
  j["model"].erase("fp32_residual");
  std::vector<std::string> unrecorded;
  const RunConfig r = run_config_from_json(j, 1, "state.json", &unrecorded);
  EXPECT_EQ(unrecorded, (std::vector<std::string>{"model.precision", "model.fp32_residual"}));
  EXPECT_EQ(r.model.precision, DType::F32);
  EXPECT_EQ(r.lr_decay_steps, 0);
  EXPECT_FALSE(r.schedule.has_value());
  EXPECT_EQ(r.batch, 6);
  // Version 2 requires every field.
  const std::string e = testing_util::error_of([&] { run_config_from_json(j, 2, "state.json"); });
  EXPECT_NE(e.find("options field \"model.precision\" is missing"), std::string::npos) << e;
}

// The learning-rate schedule: warmup, cosine over decay_steps(), then flat at lr * min_lr_ratio.
TEST(RunRecords, LearningRateSchedule) {
  RunConfig r;
  r.lr = 1.0f;
  r.min_lr_ratio = 0.1f;
  r.warmup = 2;
  r.steps = 10;
  EXPECT_DOUBLE_EQ(r.lr_at(0), 0.5);
  EXPECT_DOUBLE_EQ(r.lr_at(1), 1.0);
  EXPECT_DOUBLE_EQ(r.lr_at(2), 1.0);
  EXPECT_NEAR(r.lr_at(6), 0.55, 1e-6);  // half way: the mean of lr and min_lr
  EXPECT_NEAR(r.lr_at(10), 0.1, 1e-6);
  RunConfig longer = r;
  longer.steps = 20;
  EXPECT_GT(longer.lr_at(6), r.lr_at(6)) << "a longer run decays more slowly";
  longer.lr_decay_steps = 10;  // ... unless its decay keeps the old length
  for (int64_t s = 0; s <= 10; ++s) EXPECT_EQ(longer.lr_at(s), r.lr_at(s)) << s;
  EXPECT_NEAR(longer.lr_at(15), 0.1, 1e-6) << "flat after the decay";
}

}  // namespace

namespace {
// Floats are written as people write them, and read back to the same bits.
TEST(RunRecords, FloatsAreWrittenShortestAndReadBackExactly) {
  ModelConfig m;
  m.dropout = 0.1f;
  m.norm_eps = 1e-6f;
  m.rope_theta = 500000.0f;
  const nlohmann::json j = record::to_json(m);
  EXPECT_EQ(j["dropout"].dump(), "0.1");
  EXPECT_EQ(j["norm_eps"].dump(), "1e-06");
  ModelConfig back;
  record::from_json(j, back);
  EXPECT_TRUE(back == m);
  // Every float of a sweep over magnitudes and mantissas reads back to its own bits.
  uint32_t bits = 0x00800000u;  // the smallest normal
  for (int k = 0; k < 200000; ++k, bits += 0x28A1u) {  // the whole normal range
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (!std::isfinite(f)) break;
    float g = 0;
    record::from_json(nlohmann::json::parse(record::to_json(f).dump()), g);
    ASSERT_EQ(std::memcmp(&f, &g, sizeof f), 0) << f;
  }
  const std::string e = record::describe(record::diff(ModelConfig{}, m), "a", "b");
  EXPECT_NE(e.find("dropout 0.0 (a) vs 0.1 (b)"), std::string::npos) << e;
}
}  // namespace
