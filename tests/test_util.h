// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

// A test that needs an optional tool or input (python3-torch, node and npm, python3-sentencepiece,
// chromium, mpirun, the ../shared folder) skips without it, saying what to install, so the test command
// passes on a user's machine. CI installs every one and sets REMAT_REQUIRE_TOOLS=1, where a missing one
// fails the test instead: an install step that goes missing cannot hide a reference check again.
#define REMAT_SKIP_WITHOUT(why)                                                                        \
  do {                                                                                                 \
    if (::remat::testing_util::tools_required())                                                       \
      FAIL() << "REMAT_REQUIRE_TOOLS is set, and this test's tool or input is missing: " << why;       \
    GTEST_SKIP() << why;                                                                               \
  } while (0)

namespace remat::testing_util {

inline bool tools_required() {
  const char* v = std::getenv("REMAT_REQUIRE_TOOLS");
  return v != nullptr && std::string(v) == "1";
}

// A fresh directory per test under testing::TempDir(), removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("remat_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Path of `name` inside the directory.
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

// The message of the remat::Error that f throws, or a marker when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const remat::Error& e) {
    return e.what();
  }
  return "<no remat::Error thrown>";
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace remat::testing_util
