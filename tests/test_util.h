// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace remat::testing_util {

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
