// What users read cites published work by author and year, never the project's own documents: no
// "the spec", no issue numbers, no "section 7" of an unnamed text. Read in the text that reaches users:
// every C++ string literal under src/, and the lines of bench/ and scripts/ that print (echo, printf,
// print(...)). Comments may name whatever helps the next developer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::regex kOwnDocuments(R"(\bthe spec\b|\bspec's\b|\bissue ?#?[0-9]+|#[0-9]+'s\b|\bsection [0-9]+(/[0-9]+)?\b)",
                               std::regex::icase);

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The string literals of a C++ source, comments dropped (a rough lexer: enough for this code base).
std::vector<std::string> literals(const std::string& src) {
  std::vector<std::string> out;
  for (size_t i = 0; i < src.size(); ++i) {
    if (src.compare(i, 2, "//") == 0) {
      i = src.find('\n', i);
      if (i == std::string::npos) break;
    } else if (src.compare(i, 2, "/*") == 0) {
      i = src.find("*/", i);
      if (i == std::string::npos) break;
      ++i;
    } else if (src[i] == '\'') {
      i = src.find('\'', i + (src[i + 1] == '\\' ? 3 : 2));  // a char literal, '"' included
      if (i == std::string::npos) break;
    } else if (src[i] == '"') {
      std::string lit;
      for (++i; i < src.size() && src[i] != '"'; ++i) {
        if (src[i] == '\\') lit += src[i++];
        lit += src[i];
      }
      out.push_back(lit);
    }
  }
  return out;
}

}  // namespace

TEST(UserText, CitesPublishedWorkNotOurOwnDocuments) {
  const fs::path root = REMAT_SOURCE_DIR;
  int files = 0, strings = 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "src")) {
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    ++files;
    for (const std::string& lit : literals(read(e.path()))) {
      ++strings;
      EXPECT_FALSE(std::regex_search(lit, kOwnDocuments)) << e.path() << ": \"" << lit << "\"";
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(strings, 2000);
  const std::regex prints(R"(^\s*(echo|printf|print\(|fail\(|sys\.exit\())");
  for (const char* dir : {"bench", "scripts"})
    for (const auto& e : fs::directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".sh" && ext != ".py") continue;
      std::istringstream in(read(e.path()));
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        if (std::regex_search(line, prints))
          EXPECT_FALSE(std::regex_search(line, kOwnDocuments)) << e.path() << ":" << n << ": " << line;
      }
    }
  // The check itself: it finds what it looks for.
  EXPECT_TRUE(std::regex_search(std::string("as the spec says"), kOwnDocuments));
  EXPECT_TRUE(std::regex_search(std::string("issue #10's targets"), kOwnDocuments));
  EXPECT_TRUE(std::regex_search(std::string("see section 2/7"), kOwnDocuments));
  EXPECT_EQ(literals("a = \"x\"; // \"the spec\"\n b = '\"'; c = \"y\\\"z\";").size(), 2u);
}
