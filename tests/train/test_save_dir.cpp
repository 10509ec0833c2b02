// A checkpoint that cannot be written does not cost the weights: --save is still written (it may be
// on another disk), and the run then fails naming the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "train/run_state.h"
#include "train/save_dir.h"
#include "train/trainer.h"
#include "test_util.h"
#include "options.h"

namespace fs = std::filesystem;
using namespace remat;
using remat::testing_util::error_of;

namespace {

class SaveDirTest : public remat::testing_util::TempDirTest {};

TrainOptions tiny() {
  TrainOptions o = test_options::quiet();
  o.model.L = 2;
  o.model.C = 32;
  o.model.NH = 2;
  o.model.T = 16;
  o.model.V = 256;
  o.steps = 3;
  o.batch = 2;
  return o;
}

}  // namespace

TEST_F(SaveDirTest, FailedCheckpointStillWritesSave) {
  TrainOptions o = tiny();
  o.save_dir = p("ck");
  o.save = p("w.safetensors");
  // Something else takes the final checkpoint's name after the run has started.
  o.on_step = [&](int64_t st, float) {
    if (st == 2) std::ofstream(p("ck/step-000003")) << "not a checkpoint";
  };
  Trainer t(o);
  const std::string e = error_of([&] { t.run(); });
  EXPECT_NE(e.find("step-000003"), std::string::npos) << e;
  EXPECT_NE(e.find("not this run's checkpoint"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_regular_file(p("w.safetensors"))) << "--save was skipped";
  std::ifstream f(p("ck/step-000003"));
  std::string text;
  std::getline(f, text);
  EXPECT_EQ(text, "not a checkpoint") << "the other file was replaced";
}

TEST_F(SaveDirTest, RunIdsAreNewAndOwnershipFollowsThem) {
  const std::string a = new_run_id(), b = new_run_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  TrainOptions o = tiny();
  o.save_dir = p("ck");
  o.steps = 1;
  Trainer(o).run();
  const RunState st = read_run_state(p("ck/step-000001"));
  EXPECT_EQ(st.identity.run.size(), 32u);
  EXPECT_FALSE(st.identity.train_data.empty());
  EXPECT_FALSE(st.identity.weights.empty());
  SaveDir mine(p("other"), st.identity.run, -1, false);
  EXPECT_TRUE(mine.owns(p("ck/step-000001")));
  SaveDir theirs(p("other2"), a, -1, false);
  EXPECT_FALSE(theirs.owns(p("ck/step-000001")));
}

// state.json's counts are whole numbers in range: a float such as 1e308 (which no integer holds), a
// negative step or more skipped steps than steps are refused by name, never converted.
TEST_F(SaveDirTest, StateCountsAreCheckedStrictly) {
  TrainOptions o = tiny();
  o.save_dir = p("ck");
  o.steps = 1;
  Trainer(o).run();
  const std::string path = p("ck/step-000001/state.json");
  std::ifstream in(path);
  const nlohmann::json good = nlohmann::json::parse(in);
  for (const auto& [key, value, needle] :
       {std::tuple<const char*, nlohmann::json, const char*>{"skipped", 1e308, "not a whole number"},
        {"step", -1, "outside 0.."},
        {"step", "3", "not a whole number"},
        {"skipped", 5, "5 skipped steps of 1"},
        {"version", 1e9, "not a whole number"}}) {
    nlohmann::json j = good;
    j[key] = value;
    std::ofstream(path) << j.dump();
    const std::string e = error_of([&] { read_run_state(p("ck/step-000001")); });
    EXPECT_NE(e.find(needle), std::string::npos) << key << " = " << value.dump() << ": " << e;
  }
}
