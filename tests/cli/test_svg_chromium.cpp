// scripts/check-svg.sh renders remat's pictures in headless Chromium at two sizes: the timeline with
// every category, the frontier with a budget, and the frontier of a budget no plan meets each become
// two PNGs of the right size with a picture in them. Skipped where chromium is not installed (it is
// not needed by the build: apt-get install chromium).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"
#include "run.h"

namespace {

using namespace remat_cli_test;

bool has_chromium() {
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system(("command -v " + std::string(b) + " >/dev/null 2>&1").c_str()) == 0) return true;
  return false;
}

// A PNG's width and height from its IHDR chunk (bytes 16-23, big-endian), or {0, 0}.
std::pair<unsigned, unsigned> png_size(const std::string& bytes) {
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || bytes.compare(12, 4, "IHDR") != 0) return {0, 0};
  auto be = [&](size_t at) {
    unsigned v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  return {be(16), be(20)};
}

TEST(SvgChromium, PicturesRenderAtTwoSizes) {
  if (!has_chromium()) REMAT_SKIP_WITHOUT("needs chromium to render the pictures: apt-get install chromium");
  TempDir d;
  RunResult r = run_remat({"trace", "--layers", "4", "--recompute", "block", "--svg", d / "t.svg", "--svg-persistent"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_remat({"plan", "--layers", "4", "--step-budget", "28MiB", "--frontier", "--svg", d / "f.svg"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_remat({"plan", "--layers", "4", "--step-budget", "20MiB", "--svg", d / "g.svg"});
  ASSERT_EQ(r.exit_code, 1) << r.describe();  // no plan fits: drawn, then refused

  // This file's path as the compiler was given it: relative to the build directory, where the test
  // binaries are, when not absolute.
  const fs::path here = fs::canonical("/proc/self/exe").parent_path() / __FILE__;
  const std::string script = (here.parent_path().parent_path().parent_path() / "scripts" / "check-svg.sh").string();
  ASSERT_TRUE(fs::exists(script)) << script;
  const std::string cmd = "bash '" + script + "' --out '" + d.path() + "/png' '" + d / "t.svg" + "' '" + d / "f.svg" +
                          "' '" + d / "g.svg" + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  for (const char* name : {"t", "f", "g"})
    for (const auto& [w, h] : {std::pair<unsigned, unsigned>{900, 560}, {450, 280}}) {
      const std::string png = d.path() + "/png/" + name + "-" + std::to_string(w) + ".png";
      EXPECT_NE(out.find(png), std::string::npos) << out;
      const std::string bytes = slurp(png);
      EXPECT_EQ(png_size(bytes), std::make_pair(w, h)) << png;
      // A blank page compresses to a few KiB; axes, labels and areas do not.
      EXPECT_GT(bytes.size(), w == 900 ? 20000u : 6000u) << png;
    }
}

}  // namespace
