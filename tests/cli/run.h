// Runs the built `remat` binary (REMAT_BINARY) as a child process for the CLI tests (Child, and
// run_remat on top of it): stdout and stderr captured separately, the exit code or the signal, and a
// timeout that kills the child.
// Children run with OMP_NUM_THREADS=1: these tests exercise the command line, not the kernels, and
// on a busy 2-core machine two OpenMP threads can make a tiny step many times slower. Children also
// get a 16 GiB address-space limit so that a runaway allocation fails instead of exhausting memory,
// except under AddressSanitizer, which reserves terabytes of shadow address space at start-up and
// cannot run under RLIMIT_AS (scripts/test-sanitize.sh builds the tests and `remat` with it alike).
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define REMAT_CLI_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REMAT_CLI_TEST_ASAN 1
#endif
#endif

namespace remat_cli_test {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;      // valid when !signaled && !timed_out
  int signal = 0;          // the terminating signal, or 0
  bool timed_out = false;  // killed by the guard
  long max_rss_kib = 0;    // the child's peak resident set (wait4's ru_maxrss), once reaped
  std::string out, err;
  bool exited() const { return !timed_out && signal == 0 && exit_code >= 0; }
  // For failure messages.
  std::string describe() const {
    std::ostringstream s;
    s << "exit " << exit_code << " signal " << signal << (timed_out ? " TIMED OUT" : "") << "\n--- stdout:\n"
      << out.substr(0, 3000) << "\n--- stderr:\n" << err.substr(0, 3000);
    return s.str();
  }
};

// How a child is started: its working directory (default: the current one) and, when non-zero, an
// RLIMIT_FSIZE (a write past it fails with EFBIG, since remat ignores SIGXFSZ).
struct SpawnOptions {
  std::string cwd;
  rlim_t fsize_limit = 0;
  // A program that runs remat (mpirun -np 2 ...): its argv, before remat's own. Empty: remat itself.
  std::vector<std::string> launcher = {};
  // OMP_NUM_THREADS=1 in the child, as the header says; false: the parent's environment as it is (a
  // test of remat's own thread count).
  bool one_thread = true;
};

// `remat args...` as a child process: stdout and stderr read as they come (so a test can wait for a
// line), signals, and finish() with a timeout that kills the child. The one fork/exec of the CLI tests.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args, const SpawnOptions& opt = {}) {
    int po[2], pe[2];
    if (pipe(po) != 0 || pipe(pe) != 0) {
      r_.err = "pipe failed";
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      dup2(po[1], 1);
      dup2(pe[1], 2);
      close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
      if (!opt.cwd.empty() && chdir(opt.cwd.c_str()) != 0) _exit(126);
      if (opt.one_thread) setenv("OMP_NUM_THREADS", "1", 1);
      // A guard, not a test condition: a size check that fails must not let the child OOM the machine.
#ifndef REMAT_CLI_TEST_ASAN
      const rlimit as{rlim_t(16) << 30, rlim_t(16) << 30};
      setrlimit(RLIMIT_AS, &as);
#endif
      if (opt.fsize_limit) {
        const rlimit l{opt.fsize_limit, opt.fsize_limit};
        setrlimit(RLIMIT_FSIZE, &l);
      }
      std::vector<std::string> all = opt.launcher;
      all.push_back(REMAT_BINARY);
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(all.front().c_str(), argv.data());
      _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    fds_[0] = po[0];
    fds_[1] = pe[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      finish(10);
    }
    for (int& f : fds_)
      if (f >= 0) close(f), f = -1;
  }

  // Waits until `path` holds at least `lines` lines (true), or the child has exited / timeout_s passed.
  bool wait_for_lines(const std::string& path, size_t lines, double timeout_s = 60) {
    return wait_until([&] { return count_lines(path) >= lines; }, timeout_s);
  }
  // Waits until the child's stdout (or stderr) so far contains `needle`.
  bool wait_for_output(const std::string& needle, bool on_stderr = false, double timeout_s = 60) {
    return wait_until([&] { return (on_stderr ? r_.err : r_.out).find(needle) != std::string::npos; }, timeout_s);
  }
  // Has the child exited (reaped here; finish() then returns its status)?
  bool exited() {
    if (pid_ <= 0) return true;
    if (!reaped_) {
      int status = 0;
      rusage ru{};
      if (wait4(pid_, &status, WNOHANG, &ru) == pid_) record(status, ru);
    }
    return reaped_;
  }
  void signal(int sig) {
    if (pid_ > 0 && !reaped_) kill(pid_, sig);
  }
  // What was read so far.
  const RunResult& so_far() const { return r_; }
  // Reads until the child closes its outputs (killing it after timeout_s) and returns the result.
  RunResult finish(double timeout_s = 120) {
    if (pid_ <= 0) return r_;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (fds_[0] >= 0 || fds_[1] >= 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        r_.timed_out = true;
        if (!reaped_) kill(pid_, SIGKILL);
        break;
      }
      drain(int(std::min<long long>(left, 100)));
    }
    for (int& f : fds_)
      if (f >= 0) close(f), f = -1;
    if (!reaped_) {
      int status = 0;
      rusage ru{};
      wait4(pid_, &status, 0, &ru);
      record(status, ru);
    }
    return r_;
  }

 private:
  static size_t count_lines(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    size_t n = 0;
    for (std::string line; std::getline(f, line);) ++n;
    return n;
  }
  template <class Pred>
  bool wait_until(Pred done, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      if (done()) return true;
      if (fds_[0] < 0 && fds_[1] < 0) return done();  // the child closed its outputs: nothing more comes
      drain(10);
    }
    return done();
  }
  void record(int status, const rusage& ru) {
    reaped_ = true;
    r_.max_rss_kib = ru.ru_maxrss;
    if (WIFEXITED(status)) r_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r_.signal = WTERMSIG(status);
  }
  void drain(int ms) {
    pollfd p[2] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}};
    if (poll(p, 2, ms) <= 0) return;
    std::string* bufs[2] = {&r_.out, &r_.err};
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = read(fds_[i], buf, sizeof buf);
      if (n > 0) {
        bufs[i]->append(buf, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds_[i]);
        fds_[i] = -1;
      }
    }
  }
  pid_t pid_ = -1;
  bool reaped_ = false;
  int fds_[2] = {-1, -1};
  RunResult r_;
};

// Runs `remat args...` in `cwd` (default: the current directory) to the end.
inline RunResult run_remat(const std::vector<std::string>& args, const std::string& cwd = "",
                           double timeout_s = 120) {
  SpawnOptions o;
  o.cwd = cwd;
  return Child(args, o).finish(timeout_s);
}

// A fresh directory under testing::TempDir(), removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::path(testing::TempDir()) / "remat_cli_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }
  // Writes `bytes` to `name` and returns the full path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream f(*this / name, std::ios::binary);
    f << bytes;
    return *this / name;
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path_)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> r;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) r.push_back(line);
  return r;
}

// The smallest training run: flags every test appends to `remat train`.
inline std::vector<std::string> tiny_train(std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"train", "--preset", "tiny", "--eval-every", "0", "--sample-tokens", "0", "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The CLI's user-error contract: one line on stderr, "remat: [component] what (hint: ...)", exit `code` (1
// for remat::Error, 2 for a parse error), no signal, no abort.
inline std::string check_user_error(const RunResult& r, int code, const std::vector<std::string>& needles) {
  SCOPED_TRACE(r.describe());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.signal, 0) << "killed by a signal";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.exit_code, code);
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos);
  const auto lines = split_lines(r.err);
  EXPECT_EQ(lines.size(), 1u) << "stderr must be exactly one line";
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n');
  const std::string line = lines.empty() ? "" : lines[0];
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.rfind("remat: [", 0), 0u) << line;
  EXPECT_NE(line.find("(hint: "), std::string::npos) << line;
  for (const auto& n : needles) EXPECT_NE(line.find(n), std::string::npos) << "missing '" << n << "' in: " << line;
  return line;
}

}  // namespace remat_cli_test
