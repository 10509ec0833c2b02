// Checkpoint folders are the run's own: a new run refuses a folder holding another run, --keep deletes
// only the run's own checkpoints, a lock keeps a second run out, and a resume checks its data by
// content and the checkpoint's files against the checkpoint's own record.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "core/fingerprint.h"
#include "core/record.h"
#include "core/safetensors.h"
#include "run.h"

namespace {

using namespace remat_cli_test;

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kRun = {"--batch", "2", "--seq", "32", "--dropout", "0.1"};

RunResult train(const std::vector<std::string>& extra) { return run_remat(tiny_train(with(kRun, extra))); }

// A text file of `n` pseudo-random words, the same for the same seed.
std::string words(size_t n, unsigned seed) {
  static const char* w[] = {"the ", "king ", "shall ", "not ", "sleep ", "tonight ", "and ", "a ", "rose\n", "of "};
  std::mt19937 g(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += w[g() % 10];
  return s;
}

std::vector<std::string> steps_in(const std::string& dir) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("step-", 0) == 0) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

// An older run's checkpoints are not the new run's to delete or to be resumed by mistake.
TEST(SaveDir, NewRunRefusesAFolderHoldingAnotherRun) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "6", "--save-dir", d / "ck", "--save-every", "2", "--keep", "1"}).exit_code, 0);
  ASSERT_EQ(steps_in(d / "ck"), std::vector<std::string>{"step-000006"});
  const std::string before = slurp(d / "ck/step-000006/weights.safetensors");
  const RunResult r = train({"--steps", "4", "--seed", "7", "--save-dir", d / "ck", "--save-every", "1", "--keep", "1"});
  check_user_error(r, 1, {"--save-dir", "holds the checkpoints of another run", "step-000006", "--resume"});
  EXPECT_EQ(steps_in(d / "ck"), std::vector<std::string>{"step-000006"});
  EXPECT_EQ(slurp(d / "ck/step-000006/weights.safetensors"), before);
}

// Folders named like checkpoints that remat did not write are never deleted, and refused up front.
TEST(SaveDir, KeepNeverDeletesWhatIsNotTheRunsOwn) {
  TempDir d;
  fs::create_directories(d / "ck/step-000001");
  d.write("ck/step-000001/notes.txt", "mine");
  fs::create_directories(d / "ck/step-999999");
  const RunResult r = train({"--steps", "3", "--save-dir", d / "ck", "--save-every", "1", "--keep", "1"});
  check_user_error(r, 1, {"step-000001", "not a remat checkpoint"});
  EXPECT_EQ(slurp(d / "ck/step-000001/notes.txt"), "mine");
  EXPECT_TRUE(fs::is_directory(d / "ck/step-999999"));

  // In a folder of its own, --keep prunes only the run's checkpoints, through a resume too; other
  // files stay.
  fs::create_directories(d / "ck2");
  d.write("ck2/readme.txt", "notes");
  ASSERT_EQ(train({"--steps", "3", "--save-dir", d / "ck2", "--save-every", "1", "--keep", "2"}).exit_code, 0);
  EXPECT_EQ(steps_in(d / "ck2"), (std::vector<std::string>{"step-000002", "step-000003"}));
  const RunResult res = train({"--resume", d / "ck2", "--steps", "5", "--lr-decay-steps", "3", "--save-every", "1"});
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_EQ(steps_in(d / "ck2"), (std::vector<std::string>{"step-000004", "step-000005"}));
  EXPECT_EQ(slurp(d / "ck2/readme.txt"), "notes");
}

TEST(SaveDir, ALockKeepsASecondRunOut) {
  TempDir d;
  fs::create_directories(d / "ck");
  const int fd = ::open((d / "ck").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  check_user_error(train({"--steps", "2", "--save-dir", d / "ck"}), 1,
                   {"another remat run (pid " + std::to_string(::getpid()) + ")", "--save-dir"});
  ::close(fd);  // released: the folder is free again
  EXPECT_EQ(train({"--steps", "2", "--save-dir", d / "ck"}).exit_code, 0);
  EXPECT_EQ(steps_in(d / "ck"), std::vector<std::string>{"step-000002"});
  EXPECT_EQ(std::distance(fs::directory_iterator(d / "ck"), fs::directory_iterator()), 1) << "nothing else added";
}

// Resume checks the data by content: a reversed or truncated file is refused, a moved copy resumes
// bit-identically.
TEST(SaveDir, ResumeChecksTheDataByContent) {
  TempDir d;
  const std::string text = words(6000, 1);
  d.write("data.txt", text);
  const RunResult full = train({"--steps", "4", "--data", d / "data.txt", "--save", d / "full.safetensors"});
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  ASSERT_EQ(train({"--steps", "2", "--lr-decay-steps", "4", "--data", d / "data.txt", "--save-dir", d / "ck"}).exit_code, 0);

  std::string reversed(text.rbegin(), text.rend());
  d.write("data.txt", reversed);
  check_user_error(train({"--resume", d / "ck", "--steps", "4"}), 1,
                   {"training data is not what the checkpoint", "trained on", "xxh3"});
  d.write("data.txt", text.substr(0, text.size() - 100));
  check_user_error(train({"--resume", d / "ck", "--steps", "4"}), 1, {"is not what the checkpoint"});

  // The original content, moved: --data names it where it is now.
  d.write("moved.txt", text);
  fs::remove(d / "data.txt");
  check_user_error(train({"--resume", d / "ck", "--steps", "4"}), 1, {"is gone", "--data"});
  const RunResult res =
      train({"--resume", d / "ck", "--steps", "4", "--data", d / "moved.txt", "--save", d / "resumed.safetensors"});
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors"));
}

// The checkpoint's own files must be the ones it recorded: weights from another run of the same
// shape, a hand-edited step, or moments AdamW cannot have written are refused.
TEST(SaveDir, ResumeChecksTheCheckpointsOwnFiles) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "2", "--save-dir", d / "a"}).exit_code, 0);
  ASSERT_EQ(train({"--steps", "2", "--seed", "9", "--save-dir", d / "b"}).exit_code, 0);
  const std::string a = d / "a/step-000002", b = d / "b/step-000002";
  const std::string orig = slurp(a + "/weights.safetensors");
  fs::copy_file(b + "/weights.safetensors", a + "/weights.safetensors", fs::copy_options::overwrite_existing);
  check_user_error(train({"--resume", d / "a", "--steps", "4"}), 1,
                   {"weights.safetensors", "is not the file its checkpoint wrote"});
  d.write("a/step-000002/weights.safetensors", orig);

  // A hand-edited step: state.json says 1, the moments were written at step 2.
  nlohmann::json st = nlohmann::json::parse(slurp(a + "/state.json"));
  const nlohmann::json good = st;
  st["step"] = 1;
  d.write("a/step-000002/state.json", st.dump(2));
  check_user_error(train({"--resume", a, "--steps", "4", "--save-dir", d / "a2"}), 1,
                   {"adam_m.safetensors", "belongs to step 2", "state.json says step 1"});
  d.write("a/step-000002/state.json", good.dump(2));

  // A NaN second moment, with the fingerprint updated as a careful forger would.
  {
    remat::SafetensorsReader r(a + "/adam_v.safetensors");
    std::vector<std::pair<std::string, remat::Tensor>> ts;
    for (const auto& e : r.entries()) {
      remat::Tensor t = remat::Tensor::zeros(e.shape, remat::Category::OptimizerState, "test.moment");
      r.read_f32(e, t.span());
      ts.emplace_back(e.name, std::move(t));
    }
    ts[0].second.span()[0] = std::nanf("");
    std::vector<std::pair<std::string, const remat::Tensor*>> list;
    for (auto& [n, t] : ts) list.emplace_back(n, &t);
    remat::save_safetensors(a + "/adam_v.safetensors", list, r.metadata());
  }
  st = good;
  st["identity"]["adam_v"] = remat::record::to_json(remat::fingerprint_file(a + "/adam_v.safetensors"));
  d.write("a/step-000002/state.json", st.dump(2));
  check_user_error(train({"--resume", d / "a", "--steps", "4"}), 1, {"adam_v.safetensors", "non-finite", "AdamW"});
}

// Resuming an older checkpoint into its folder would overwrite the run's later ones: refused, and the
// hint's way (another --save-dir for the branch) works.
TEST(SaveDir, ResumeFromAnOlderStepDoesNotOverwriteLaterOnes) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "4", "--save-dir", d / "ck", "--save-every", "2", "--keep", "2"}).exit_code, 0);
  const std::string later = slurp(d / "ck/step-000004/weights.safetensors");
  check_user_error(train({"--resume", d / "ck/step-000002"}), 1, {"later checkpoint of this run", "step-000004"});
  EXPECT_EQ(slurp(d / "ck/step-000004/weights.safetensors"), later);
  const RunResult r = train({"--resume", d / "ck/step-000002", "--save-dir", d / "branch", "--save", d / "b.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(slurp(d / "branch/step-000004/weights.safetensors"), later) << "the branch replays the same steps";
}

// A resumed run does not write into a folder that holds another run's checkpoints.
TEST(SaveDir, ResumeIntoAnotherRunsFolderIsRefused) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "2", "--save-dir", d / "a"}).exit_code, 0);
  ASSERT_EQ(train({"--steps", "2", "--seed", "9", "--save-dir", d / "b"}).exit_code, 0);
  const std::string before = slurp(d / "a/step-000002/state.json");
  check_user_error(train({"--resume", d / "b", "--steps", "4", "--lr-decay-steps", "2", "--save-dir", d / "a"}), 1,
                   {"holds the checkpoints of another run", "step-000002"});
  EXPECT_EQ(slurp(d / "a/step-000002/state.json"), before);
}
