// MetricsFile (train/metrics_file.h): --metrics-out's lines, "-" for stdout, a resume's rewrite.
#include "train/metrics_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace {

class MetricsFileTest : public remat::testing_util::TempDirTest {
 protected:
  std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
};

}  // namespace

TEST_F(MetricsFileTest, AFreshRunReplacesTheFile) {
  put(p("m.jsonl"), "{\"step\": 9}\n");
  {
    remat::MetricsFile m(p("m.jsonl"), 0);
    m.line("{\"step\": 1}");
    m.check();
  }
  EXPECT_EQ(slurp(p("m.jsonl")), "{\"step\": 1}\n");
}

TEST_F(MetricsFileTest, AResumeKeepsOnlyTheStepsUpToItsCheckpoint) {
  put(p("m.jsonl"), "{\"step\": 1}\n{\"step\": 2}\nnot json\n{\"step\": 3}\n{\"step\": 4}\n{\"step\": 5, \"lo");
  {
    remat::MetricsFile m(p("m.jsonl"), 2);
    m.line("{\"step\": 3, \"again\": true}");
  }
  EXPECT_EQ(slurp(p("m.jsonl")), "{\"step\": 1}\n{\"step\": 2}\nnot json\n{\"step\": 3, \"again\": true}\n");
  // A resume without the file starts it.
  {
    remat::MetricsFile m(p("new.jsonl"), 7);
    m.line("{\"step\": 8}");
  }
  EXPECT_EQ(slurp(p("new.jsonl")), "{\"step\": 8}\n");
}

TEST_F(MetricsFileTest, DashIsStdout) {
  testing::internal::CaptureStdout();
  {
    remat::MetricsFile m("-", 0);
    m.line("{\"step\": 1}");
    m.check();
  }
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "{\"step\": 1}\n");
  EXPECT_FALSE(std::filesystem::exists("-"));
}
