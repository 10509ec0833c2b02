// IoPolicy (core/io_policy.h): the one check of every command's inputs and outputs.
#include "core/io_policy.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::IoPolicy;
using In = IoPolicy::In;
using Out = IoPolicy::Out;

namespace {


class IoPolicyTest : public remat::testing_util::TempDirTest {
 protected:
  std::string file(const std::string& name, const std::string& text = "x") {
    remat::write_file_atomic(p(name), text);
    return p(name);
  }
  // The message of `policy.check()`, or "" when it passes.
  static std::string refusal(const IoPolicy& policy) {
    try {
      policy.check();
    } catch (const remat::Error& e) {
      return e.what();
    }
    return "";
  }
  static void expect_has(const std::string& msg, std::initializer_list<const char*> needles) {
    EXPECT_FALSE(msg.empty()) << "not refused";
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  }
};

}  // namespace

TEST_F(IoPolicyTest, FineInputsAndOutputsPass) {
  const std::string data = file("data.txt");
  fs::create_symlink(data, dir_ / "link.txt");
  fs::create_directories(dir_ / "model");
  EXPECT_EQ(refusal(IoPolicy()
                        .input(p("link.txt"), "--data")
                        .input(p("model"), "--init-from", In::Model)
                        .input(p("missing.bin"), "--val-data")  // the reader says it is missing
                        .output(p("w.safetensors"), "--save", Out::FileOrFolder)
                        .output("-", "--metrics-out", Out::Stream)
                        .output(p("ck/a/b"), "--save-dir", Out::Folder)
                        .output("", "--report-json", Out::Stream)),
            "");
  EXPECT_FALSE(fs::exists(dir_ / "ck")) << "the check creates nothing";
}

TEST_F(IoPolicyTest, SpecialInputsAreRefused) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0600), 0);
  expect_has(refusal(IoPolicy().input(p("fifo"), "--data")), {"--data", "fifo", "a FIFO", "hint:"});
  fs::create_symlink(p("fifo"), dir_ / "fifo-link");
  expect_has(refusal(IoPolicy().input(p("fifo-link"), "--val-data")), {"--val-data", "a FIFO"});
  expect_has(refusal(IoPolicy().input("/dev/zero", "--data")), {"--data", "character device"});
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = p("sock");
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  expect_has(refusal(IoPolicy().input(sock, "--plan")), {"--plan", "a socket"});
  ::close(s);
}

TEST_F(IoPolicyTest, AnOutputThatIsAnInputIsRefused) {
  const std::string w = file("w.safetensors");
  expect_has(refusal(IoPolicy().input(w, "--init-from", In::Model).output(w, "--out")),
             {"--out", "--init-from", "w.safetensors", "also the input"});
  // Through a symlink, a hard link, and a path spelled otherwise.
  fs::create_symlink(w, dir_ / "sym.safetensors");
  expect_has(refusal(IoPolicy().input(w, "--init-from", In::Model).output(p("sym.safetensors"), "--out")),
             {"--out", "--init-from", "sym.safetensors"});
  fs::create_hard_link(w, dir_ / "hard.safetensors");
  expect_has(refusal(IoPolicy().input(p("hard.safetensors"), "--data").output(w, "--svg")), {"--svg", "--data"});
  expect_has(refusal(IoPolicy().input(w, "--data").output(dir_.string() + "/./x/../w.safetensors", "--out")),
             {"--out", "--data"});
  // Inside an input model folder, an existing file or not.
  fs::create_directories(dir_ / "model");
  file("model/model.safetensors");
  expect_has(refusal(IoPolicy().input(p("model"), "--init-from", In::Model).output(p("model/model.safetensors"), "--out")),
             {"--out", "--init-from", "inside the input folder"});
  expect_has(refusal(IoPolicy().input(p("model"), "--init-from", In::Model).output(p("model/new.json"), "--out")),
             {"inside the input folder"});
  // The model folder itself as --save; an input inside a folder --save writes into.
  expect_has(refusal(IoPolicy().input(p("model"), "--init-from", In::Model).output(p("model"), "--save", Out::FileOrFolder)),
             {"--save", "--init-from"});
  expect_has(refusal(IoPolicy().input(p("model/model.safetensors"), "--data").output(p("model"), "--save", Out::FileOrFolder)),
             {"--data", "--save"});
  // A checkpoint folder may hold new checkpoints.
  EXPECT_EQ(refusal(IoPolicy().input(p("model"), "--resume", In::Checkpoint).output(p("model"), "--save-dir", Out::Folder)), "");
}

TEST_F(IoPolicyTest, TwoOutputsThatAreTheSameFileAreRefused) {
  expect_has(refusal(IoPolicy().output(p("x"), "--out").output(p("x"), "--svg")), {"--out and --svg", "same path"});
  expect_has(refusal(IoPolicy().output("-", "--metrics-out", Out::Stream).output("-", "--report-json", Out::Stream)),
             {"--metrics-out and --report-json"});
  const std::string a = file("a.json");
  fs::create_symlink(a, dir_ / "b.json");
  expect_has(refusal(IoPolicy().output(a, "--out").output(p("b.json"), "--svg")), {"--out and --svg"});
}

TEST_F(IoPolicyTest, SpecialOutputsAreRefusedWithAHint) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0600), 0);
  expect_has(refusal(IoPolicy().output(p("fifo"), "--save")), {"--save", "a FIFO, not a regular file"});
  expect_has(refusal(IoPolicy().output("/dev/null", "--metrics-out", Out::Stream)),
             {"--metrics-out", "character device", "--metrics-out - to write to stdout"});
  for (const char* d : {"/dev/stdout", "/dev/stderr", "/proc/self/fd/1", "/dev/fd/2"})
    expect_has(refusal(IoPolicy().output(d, "--report-json", Out::Stream)),
               {"--report-json", d, "descriptor of this process", "--report-json -"});
  expect_has(refusal(IoPolicy().output("-", "--save", Out::FileOrFolder)), {"--save", "stdout", "./-"});
  expect_has(refusal(IoPolicy().output(dir_.string(), "--svg")), {"--svg", "is a directory"});
  expect_has(refusal(IoPolicy().output(file("plain"), "--save-dir", Out::Folder)),
             {"--save-dir", "is a regular file, not a folder"});
}

TEST_F(IoPolicyTest, OutputsThatCannotBeWrittenAreRefused) {
  const std::string ro = file("ro.safetensors", "keep");
  ASSERT_EQ(::chmod(ro.c_str(), 0444), 0);
  expect_has(refusal(IoPolicy().output(ro, "--save", Out::FileOrFolder)), {"--save", "read-only", "chmod"});
  fs::create_directories(dir_ / "rodir");
  ASSERT_EQ(::chmod(p("rodir").c_str(), 0555), 0);
  expect_has(refusal(IoPolicy().output(p("rodir/w.safetensors"), "--save")), {"--save", "rodir", "read-only"});
  expect_has(refusal(IoPolicy().output(p("rodir/ck"), "--save-dir", Out::Folder)), {"--save-dir", "read-only"});
  ::chmod(p("rodir").c_str(), 0755);
  expect_has(refusal(IoPolicy().output(p("nodir/w.safetensors"), "--save")), {"nodir", "does not exist", "mkdir"});
  expect_has(refusal(IoPolicy().output(file("plain") + "/t.svg", "--svg")), {"cannot write --svg", "plain", "not a folder"});
  EXPECT_EQ(remat::read_file(ro), "keep");
}

TEST_F(IoPolicyTest, DashWritesToStdout) {
  testing::internal::CaptureStdout();
  remat::write_file_atomic("-", "{\"a\": 1}\n");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "{\"a\": 1}\n");
  EXPECT_FALSE(fs::exists("-"));
}
