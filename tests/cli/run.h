// Runs the built `remat` binary (REMAT_BINARY) as a child process for the CLI tests: stdout and
// stderr captured separately, the exit code or the signal, and a timeout that kills the child.
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

// Runs `remat args...` in `cwd` (default: the current directory).
inline RunResult run_remat(const std::vector<std::string>& args, const std::string& cwd = "",
                           double timeout_s = 120) {
  RunResult r;
  int po[2], pe[2];
  if (pipe(po) != 0 || pipe(pe) != 0) {
    r.err = "pipe failed";
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    setenv("OMP_NUM_THREADS", "1", 1);
    // A guard, not a test condition: a size check that fails must not let the child OOM the machine.
#ifndef REMAT_CLI_TEST_ASAN
    const rlimit as{rlim_t(16) << 30, rlim_t(16) << 30};
    setrlimit(RLIMIT_AS, &as);
#endif
    std::vector<std::string> all{REMAT_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(REMAT_BINARY, argv.data());
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  std::string* bufs[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, int(left.count())) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        bufs[i]->append(buf, size_t(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
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

}  // namespace remat_cli_test
