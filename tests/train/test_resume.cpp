// Runs that survive, through the Trainer API: a run stopped at step k and resumed from its checkpoint
// gives bit-identical losses and weights to an uninterrupted run under every strategy (dropout and a
// policy included); checkpoints are kept and pruned; divergence stops or skips a step without
// touching the weights; metrics are written line by line and stay valid JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/weights.h"
#include "train/run_state.h"
#include "train/trainer.h"
#include "test_util.h"
#include "options.h"

namespace fs = std::filesystem;
using namespace remat;
using remat::testing_util::error_of;

namespace {

class Resume : public remat::testing_util::TempDirTest {};

TrainOptions small_opts(const std::string& strategy = "none", const std::string& policy = "none",
                        Arch arch = Arch::GPT2) {
  TrainOptions o = test_options::quiet();
  o.model.arch = arch;
  o.model.L = 3;
  o.model.C = 32;
  o.model.NH = arch == Arch::Llama ? 4 : 2;
  o.model.KVH = arch == Arch::Llama ? 2 : 0;
  o.model.T = 16;
  o.model.V = 256;
  o.model.dropout = 0.1f;
  o.steps = 6;
  o.batch = 4;
  o.micro_batch = 2;  // two micro-steps: the data position is step * accum + k
  o.warmup = 2;
  o.lr = 3e-3f;
  o.seed = 7;
  o.recompute = strategy;
  o.policy = policy;
  return o;
}

std::vector<std::vector<float>> weights_of(Trainer& t) {
  std::vector<std::vector<float>> w;
  for (const Param& p : t.model().params()) w.emplace_back(p.value.data(), p.value.data() + p.value.numel());
  return w;
}

bool bit_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> r;
  for (std::string l; std::getline(f, l);) r.push_back(l);
  return r;
}

struct Case {
  std::string strategy, policy;
  Arch arch;
};

}  // namespace

class ResumeEvery : public Resume, public ::testing::WithParamInterface<Case> {};

TEST_P(ResumeEvery, StoppedAndResumedRunIsBitIdentical) {
  const Case c = GetParam();
  // The uninterrupted run.
  TrainOptions full_o = small_opts(c.strategy, c.policy, c.arch);
  Trainer full(full_o);
  const TrainSummary fs_ = full.run();
  ASSERT_EQ(fs_.losses.size(), 6u);
  const auto full_w = weights_of(full);

  // The same run, stopped after step 3 as a signal would (the flag is polled between steps).
  std::atomic<int> flag{0};
  TrainOptions a = full_o;
  a.save_dir = p("ck");
  a.stop = &flag;
  a.on_step = [&](int64_t st, float) {
    if (st == 2) flag = 1;
  };
  {
    Trainer t(a);
    const TrainSummary s = t.run();
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.steps_done, 3);
    EXPECT_EQ(s.checkpoint, p("ck/step-000003"));
    ASSERT_EQ(s.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.losses[i], fs_.losses[i]);
  }
  // Resumed from the save dir (its newest checkpoint), in a new Trainer.
  TrainOptions b = full_o;
  b.resume = p("ck");
  Trainer r(b);
  EXPECT_EQ(r.start_step(), 3);
  const TrainSummary rs = r.run();
  EXPECT_FALSE(rs.stopped);
  EXPECT_EQ(rs.start_step, 3);
  ASSERT_EQ(rs.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(&rs.losses[i], &fs_.losses[3 + i], sizeof(float)), 0)
        << "step " << 4 + i << ": " << rs.losses[i] << " vs " << fs_.losses[3 + i];
  EXPECT_TRUE(bit_equal(weights_of(r), full_w)) << "final weights differ";
}

INSTANTIATE_TEST_SUITE_P(Strategies, ResumeEvery,
                         ::testing::Values(Case{"none", "none", Arch::GPT2}, Case{"block", "none", Arch::GPT2},
                                           Case{"sqrt", "selective", Arch::GPT2}, Case{"all", "gelu", Arch::GPT2},
                                           Case{"block", "selective", Arch::Llama}, Case{"all", "none", Arch::Llama}),
                         [](const auto& info) {
                           return std::string(arch_name(info.param.arch)) + "_" + info.param.strategy + "_" +
                                  info.param.policy;
                         });

TEST_F(Resume, CheckpointLayoutKeepAndStepFolder) {
  TrainOptions o = small_opts();
  o.steps = 5;
  o.save_dir = p("ck");
  o.save_every = 2;
  o.keep = 2;
  Trainer t(o);
  const TrainSummary s = t.run();
  EXPECT_EQ(s.checkpoint, p("ck/step-000005"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(p("ck"))) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-000004", "step-000005"})) << "kept the newest 2, no temporaries";
  for (const char* f : {"weights.safetensors", "adam_m.safetensors", "adam_v.safetensors", "state.json"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(p("ck/step-000004")) / f)) << f;
  const RunState st = read_run_state(p("ck/step-000004"));
  EXPECT_EQ(st.step, 4);
  EXPECT_EQ(st.options.batch, 4);
  EXPECT_EQ(st.options.model.L, 3);
  EXPECT_EQ(st.options.recompute, "none");
  // The weights file is a plain Hugging Face safetensors.
  SafetensorsReader w(p("ck/step-000004/weights.safetensors"));
  EXPECT_NE(w.find("h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(find_checkpoint(p("ck")), p("ck/step-000005"));
  EXPECT_EQ(find_checkpoint(p("ck/step-000004")), p("ck/step-000004"));

  // Resuming from an older step folder directly replays step 5 identically.
  TrainOptions r = small_opts();
  r.steps = 5;
  r.resume = p("ck/step-000004");
  Trainer rt(r);
  const TrainSummary rs = rt.run();
  ASSERT_EQ(rs.losses.size(), 1u);
  EXPECT_EQ(rs.losses[0], s.losses[4]);
  EXPECT_TRUE(bit_equal(weights_of(rt), weights_of(t)));
}

TEST_F(Resume, RefusesAnotherModelFewerStepsAndInitFrom) {
  TrainOptions o = small_opts();
  o.steps = 2;
  o.save_dir = p("ck");
  Trainer(o).run();
  TrainOptions r = small_opts();
  r.model.L = 2;
  r.resume = p("ck");
  std::string msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("[checkpoint]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers 3 (checkpoint) vs 2 (options)"), std::string::npos) << msg;
  r = small_opts();
  r.steps = 1;
  r.resume = p("ck");
  msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("below the checkpoint's step 2"), std::string::npos) << msg;
  r.steps = 4;
  r.init_from = p("ck/step-000002/weights.safetensors");
  msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("--resume and --init-from"), std::string::npos) << msg;
  r = small_opts();
  r.resume = p("nothing");
  msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("not a folder"), std::string::npos) << msg;
  fs::create_directories(p("empty"));
  r.resume = p("empty");
  msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("no checkpoint in"), std::string::npos) << msg;
  // A damaged state.json is named.
  std::ofstream(p("ck/step-000002/state.json")) << "{\"format\": \"remat-checkpoint\", \"version\": 99}";
  r.resume = p("ck");
  msg = error_of([&] { Trainer t(r); });
  EXPECT_NE(msg.find("format version 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("versions 1 to 4"), std::string::npos) << msg;
}

TEST_F(Resume, OptionChecks) {
  TrainOptions o = small_opts();
  o.save_every = 2;
  std::string msg = error_of([&] { Trainer t(o); });
  EXPECT_NE(msg.find("--save-every needs --save-dir"), std::string::npos) << msg;
  o.save_dir = p("ck");
  o.save_every = -1;
  msg = error_of([&] { Trainer t(o); });
  EXPECT_NE(msg.find("--save-every must be >= 0"), std::string::npos) << msg;
  o.save_every = 1;
  o.keep = 0;
  msg = error_of([&] { Trainer t(o); });
  EXPECT_NE(msg.find("--keep must be at least 1"), std::string::npos) << msg;
}

// An lr this large overflows within a few steps.
TrainOptions diverging() {
  TrainOptions o = small_opts();
  o.model.dropout = 0;
  o.lr = 1e4f;
  o.warmup = 0;
  o.clip = 0;
  o.steps = 40;
  return o;
}

TEST_F(Resume, DivergenceStopsNamingTheStepAndSavesNothing) {
  TrainOptions o = diverging();
  o.save = p("w.safetensors");
  o.metrics_out = p("m.jsonl");
  o.save_dir = p("ck");
  o.save_every = 1;
  o.keep = 100;
  Trainer t(o);
  const std::string msg = error_of([&] { t.run(); });
  EXPECT_NE(msg.find("[train] "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" became "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" at step "), std::string::npos) << msg;
  EXPECT_NE(msg.find("--skip-nonfinite"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(p("w.safetensors"))) << "--save must not be written with diverged weights";
  // Every metrics line is valid JSON; the last one says null and nonfinite.
  const auto lines = lines_of(p("m.jsonl"));
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines) {
    EXPECT_EQ(l.find("nan"), std::string::npos) << l;
    EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  }
  const auto last = nlohmann::json::parse(lines.back());
  EXPECT_TRUE(last.at("nonfinite").get<bool>());
  const int64_t bad = last.at("step").get<int64_t>();
  EXPECT_NE(msg.find("at step " + std::to_string(bad)), std::string::npos) << msg;
  // Checkpoints go up to the last good step only, and hold finite weights.
  const std::string newest = find_checkpoint(p("ck"));
  EXPECT_EQ(read_run_state(newest).step, bad - 1);
  TrainOptions r = diverging();
  r.init_from = newest + "/weights.safetensors";
  EXPECT_NO_THROW(Trainer t(r)) << "the last checkpoint's weights are finite";
}

TEST_F(Resume, SkipNonfiniteLeavesWeightsAndMomentsUntouched) {
  TrainOptions o = diverging();
  o.skip_nonfinite = true;
  o.quiet = true;
  Trainer t(o);
  int skipped = 0;
  for (int64_t st = 0; st < 12; ++st) {
    const auto before = weights_of(t);
    StepMeasure m;
    t.step(st, &m);
    if (!t.last_step_finite()) {
      ++skipped;
      EXPECT_TRUE(bit_equal(weights_of(t), before)) << "step " << st + 1 << " changed the weights";
    }
  }
  EXPECT_GT(skipped, 0) << "the lr does not diverge: the test is vacuous";
  // run() counts them and finishes.
  TrainOptions o2 = diverging();
  o2.skip_nonfinite = true;
  o2.steps = 12;
  o2.metrics_out = p("m.jsonl");
  Trainer t2(o2);
  const TrainSummary s = t2.run();
  EXPECT_EQ(s.skipped, skipped);
  for (const Param& p : t2.model().params())
    for (int64_t i = 0; i < p.value.numel(); ++i) ASSERT_TRUE(std::isfinite(p.value.data()[i])) << p.name;
  int flagged = 0;
  for (const auto& l : lines_of(p("m.jsonl"))) {
    const auto j = nlohmann::json::parse(l);
    if (j.contains("skipped")) ++flagged;
  }
  EXPECT_EQ(flagged, skipped);
}

TEST_F(Resume, MetricsAreWrittenAsEachStepFinishes) {
  TrainOptions o = small_opts();
  o.steps = 4;
  o.metrics_out = p("m.jsonl");
  std::vector<size_t> seen;
  o.on_step = [&](int64_t, float) { seen.push_back(lines_of(p("m.jsonl")).size()); };
  Trainer(o).run();
  EXPECT_EQ(seen, (std::vector<size_t>{1, 2, 3, 4}));
}

TEST_F(Resume, NonFiniteInitFromIsRefusedNamingTheTensor) {
  TrainOptions o = small_opts();
  o.steps = 0;
  o.save = p("w.safetensors");
  Trainer t(o);
  t.run();
  // The same weights with one NaN.
  std::vector<std::pair<std::string, const Tensor*>> list;
  Param& bad = t.model().param("h.1.mlp.c_fc.weight");
  bad.value.data()[5] = NAN;
  for (const Param& p : t.model().params()) list.emplace_back(p.name, &p.value);
  SafetensorsReader r(p("w.safetensors"));
  save_safetensors(p("nan.safetensors"), list, r.metadata());
  TrainOptions o2 = small_opts();
  o2.init_from = p("nan.safetensors");
  const std::string msg = error_of([&] { Trainer t2(o2); });
  EXPECT_NE(msg.find("h.1.mlp.c_fc.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NaN"), std::string::npos) << msg;
}

// The validation split is part of the run: --resume takes --val-fraction and --val-data from the
// checkpoint (`remat train --resume` starts from the command line's options and applies the
// checkpoint's run in place of its own run fields, as here), and validates on the same tokens, bit for bit.
TEST_F(Resume, ResumeKeepsTheValidationSplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Validation text " + std::to_string(i * 7919 % 1000) + ", held out.\n";
  std::ofstream(p("val.txt")) << text;
  for (const bool val_file : {false, true}) {
    SCOPED_TRACE(val_file ? "--val-data" : "--val-fraction 0.2");
    const std::string ck = p(val_file ? "ck_file" : "ck_fraction");
    TrainOptions o = small_opts("block", "none");
    o.eval_every = 1;
    if (val_file)
      o.val_data = p("val.txt");
    else
      o.val_fraction = 0.2;
    Trainer full(o);
    const TrainSummary fs_ = full.run();
    ASSERT_EQ(fs_.val_losses.size(), 7u) << "one before the first step, one after each";

    std::atomic<int> flag{0};
    TrainOptions a = o;
    a.save_dir = ck;
    a.stop = &flag;
    a.on_step = [&](int64_t st, float) {
      if (st == 2) flag = 1;
    };
    EXPECT_EQ(Trainer(a).run().steps_done, 3);

    // A command line with no validation flag: the defaults, then the checkpoint's options.
    TrainOptions r = small_opts("block", "none");
    r.eval_every = 1;
    const RunState st = read_run_state(find_checkpoint(ck));
    static_cast<RunConfig&>(r) = st.options;
    EXPECT_EQ(r.val_fraction, o.val_fraction);
    EXPECT_EQ(r.val_data, val_file ? fs::canonical(p("val.txt")).string() : std::string());
    r.resume = ck;
    Trainer rt(r);
    const TrainSummary rs = rt.run();
    ASSERT_EQ(rs.val_losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(std::memcmp(&rs.val_losses[i], &fs_.val_losses[3 + i], sizeof(float)), 0)
          << "val loss after step " << 3 + i << ": " << rs.val_losses[i] << " vs " << fs_.val_losses[3 + i];

    // Not vacuous: the default split (the last 10% of the corpus) validates on other tokens.
    TrainOptions d = small_opts("block", "none");
    EXPECT_NE(Trainer(d).validate(), fs_.val_losses[0]) << "the default split gives the same val loss";
  }
}
