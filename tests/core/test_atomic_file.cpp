#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::AtomicWriter;

namespace {

using remat::testing_util::error_of;

// A fresh directory per test under testing::TempDir().
class AtomicFileTest : public remat::testing_util::TempDirTest {
 protected:
  // Names of the files in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(dir_)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }
};

}  // namespace

TEST_F(AtomicFileTest, WriteAndReadRoundtripBinary) {
  std::string data("a\0b\xff\n", 5);
  data += std::string(100000, 'x');
  remat::write_file_atomic(p("f.bin"), data);
  EXPECT_EQ(remat::read_file(p("f.bin")), data);
  EXPECT_EQ(listing(), std::vector<std::string>{"f.bin"});
}

TEST_F(AtomicFileTest, EmptyFile) {
  remat::write_file_atomic(p("empty"), "");
  EXPECT_EQ(remat::read_file(p("empty")), "");
  EXPECT_EQ(fs::file_size(p("empty")), 0u);
}

TEST_F(AtomicFileTest, OverwriteReplacesContentsAndKeepsMode) {
  remat::write_file_atomic(p("f"), "old contents that are longer");
  ASSERT_EQ(::chmod(p("f").c_str(), 0600), 0);
  remat::write_file_atomic(p("f"), "new");
  EXPECT_EQ(remat::read_file(p("f")), "new");
  struct stat st {};
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(AtomicFileTest, WriterInPiecesUsesTempNextToTarget) {
  AtomicWriter w(p("out.txt"));
  EXPECT_EQ(w.temp_path(), p("out.txt") + ".tmp." + std::to_string(::getpid()));
  EXPECT_TRUE(fs::exists(w.temp_path()));
  w.write("hello ", 6);
  w.write(std::string_view("world"));
  EXPECT_EQ(w.bytes_written(), 11u);
  EXPECT_FALSE(fs::exists(p("out.txt")));  // not visible before commit
  w.commit();
  EXPECT_EQ(remat::read_file(p("out.txt")), "hello world");
  EXPECT_EQ(listing(), std::vector<std::string>{"out.txt"});
  EXPECT_NE(error_of([&] { w.commit(); }).find("called twice"), std::string::npos);
  EXPECT_NE(error_of([&] { w.write("x", 1); }).find("after commit"), std::string::npos);
}

TEST_F(AtomicFileTest, AbandonedWriteLeavesOriginalIntactAndNoTemp) {
  remat::write_file_atomic(p("ckpt"), "original");
  {
    AtomicWriter w(p("ckpt"));
    w.write(std::string(1 << 20, 'z'));
    // destroyed without commit (e.g. an exception while serialising)
  }
  EXPECT_EQ(remat::read_file(p("ckpt")), "original");
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt"});
}

TEST_F(AtomicFileTest, TwoWritersForOneTargetGetDistinctTemps) {
  AtomicWriter a(p("t")), b(p("t"));
  EXPECT_NE(a.temp_path(), b.temp_path());
  a.write("a", 1);
  b.write("b", 1);
  b.commit();
  a.commit();
  EXPECT_EQ(remat::read_file(p("t")), "a");
  EXPECT_EQ(listing(), std::vector<std::string>{"t"});
}

TEST_F(AtomicFileTest, FailedCommitRemovesTemp) {
  AtomicWriter w(p("target"));
  w.write("data", 4);
  // The target becomes a non-empty directory before commit: rename() must fail.
  fs::create_directories(dir_ / "target" / "sub");
  std::string msg = error_of([&] { w.commit(); });
  EXPECT_NE(msg.find("[io]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p("target")), std::string::npos) << msg;
  EXPECT_EQ(listing(), std::vector<std::string>{"target"});  // no temp left behind
}

TEST_F(AtomicFileTest, MissingDirectory) {
  std::string msg = error_of([&] { remat::write_file_atomic(p("nope/sub/f.txt"), "x"); });
  EXPECT_NE(msg.find("[io]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mkdir -p"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir_ / "nope"));
}

TEST_F(AtomicFileTest, TargetIsADirectory) {
  fs::create_directories(dir_ / "d");
  std::string msg = error_of([&] { remat::write_file_atomic(p("d"), "x"); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  EXPECT_EQ(listing(), std::vector<std::string>{"d"});
}

TEST_F(AtomicFileTest, ParentIsAFile) {
  remat::write_file_atomic(p("plain"), "x");
  std::string msg = error_of([&] { remat::write_file_atomic(p("plain/f"), "x"); });
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
}

TEST_F(AtomicFileTest, UnwritableDirectory) {
  fs::create_directories(dir_ / "ro");
  ASSERT_EQ(::chmod((dir_ / "ro").c_str(), 0555), 0);
  std::string msg;
  if (::geteuid() != 0) {
    msg = error_of([&] { remat::write_file_atomic(p("ro/f"), "x"); });
  } else {
    // Permission bits do not deny root (CI runs as root): write as the unprivileged user nobody in a
    // child process, and read its message back through a pipe.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      std::string m = "<could not become nobody>";
      if (::setgid(65534) == 0 && ::setuid(65534) == 0) m = error_of([&] { remat::write_file_atomic(p("ro/f"), "x"); });
      const ssize_t w = ::write(fds[1], m.data(), m.size());
      ::_exit(w == ssize_t(m.size()) ? 0 : 1);
    }
    ::close(fds[1]);
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(n));
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << msg;
  }
  ::chmod((dir_ / "ro").c_str(), 0700);
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_NE(msg.find("writable"), std::string::npos) << msg;
}

TEST_F(AtomicFileTest, WriteFailureRemovesTempAndKeepsOriginal) {
  // A file-size limit makes write() fail (EFBIG) the way a full disk does (ENOSPC).
  remat::write_file_atomic(p("model.safetensors"), "original");
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto prev = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::string msg = error_of([&] {
    AtomicWriter w(p("model.safetensors"));
    w.write(std::string(1 << 20, 'x'));
    w.commit();
  });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, prev);
  EXPECT_NE(msg.find("[io] writing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
  EXPECT_EQ(remat::read_file(p("model.safetensors")), "original");
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(AtomicFileTest, ReadFileErrors) {
  std::string msg = error_of([&] { remat::read_file(p("missing.txt")); });
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing.txt"), std::string::npos) << msg;
  msg = error_of([&] { remat::read_file(dir_.string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  remat::write_file_atomic(p("seven"), "1234567");
  EXPECT_EQ(remat::regular_file_size(p("seven")), 7u);
  msg = error_of([&] { remat::regular_file_size(p("none"), "checkpoint"); });
  EXPECT_NE(msg.find("checkpoint '"), std::string::npos) << msg;
}

// ---- outputs that must not be destroyed, stale temporaries ----

TEST_F(AtomicFileTest, SymlinkTargetIsReplacedAndTheLinkStays) {
  remat::write_file_atomic(p("real.txt"), "old");
  fs::create_symlink("real.txt", dir_ / "link.txt");
  remat::write_file_atomic(p("link.txt"), "new");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.txt"));
  EXPECT_EQ(remat::read_file(p("real.txt")), "new");
  EXPECT_EQ(listing(), (std::vector<std::string>{"link.txt", "real.txt"}));
}

TEST_F(AtomicFileTest, NonRegularTargetsAreRefused) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0600), 0);
  std::string msg = error_of([&] { remat::write_file_atomic(p("fifo"), "x"); });
  EXPECT_NE(msg.find("a FIFO, not a regular file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
  EXPECT_EQ(listing(), std::vector<std::string>{"fifo"});
}

TEST_F(AtomicFileTest, StaleTempFilesOfDeadProcessesAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: its pid no longer exists
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid());
  for (const std::string& n : {"w.bin.tmp." + dead, "w.bin.tmp." + dead + ".3", "w.bin.tmp." + alive,
                               "other.bin.tmp." + dead, std::string("w.bin.tmp.notapid")})
    remat::write_file_atomic(p(n), "junk");
  remat::write_file_atomic(p("w.bin"), "data");
  EXPECT_EQ(remat::read_file(p("w.bin")), "data");
  std::vector<std::string> want{"other.bin.tmp." + dead, "w.bin", "w.bin.tmp." + alive, "w.bin.tmp.notapid"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listing(), want);
}
