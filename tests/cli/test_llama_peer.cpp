// remat's LLaMA against an independent implementation: bench/check_llama_peer.py builds tiny
// LLaMAs (GQA, MHA, MQA) as Hugging Face folders, runs `remat grads` and a PyTorch LLaMA in float64
// on the same weights and tokens, and compares the loss and every gradient (1e-5 relative to each
// tensor's largest). Skips when python3 or PyTorch (Debian python3, python3-torch) is not installed.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

#include "test_util.h"

TEST(LlamaPeer, LossAndEveryGradientAgreeWithPyTorchToOneInAHundredThousand) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path script = root / "bench" / "check_llama_peer.py";
  ASSERT_TRUE(fs::exists(script)) << "no " << script;
  const std::string cmd = "python3 '" + script.string() + "' --remat '" + REMAT_BINARY + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // The script exits 77 without PyTorch; the shell exits 127 when python3 itself is missing (a bare
  // Debian 12 has none) and 126 when it cannot be run.
  if (code == 127 || code == 126) REMAT_SKIP_WITHOUT("python3 is not installed (apt-get install python3 python3-torch):\n" << out);
  if (code == 77) REMAT_SKIP_WITHOUT("PyTorch is not installed (apt-get install python3-torch):\n" << out);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("OK: 3 cases agree within rtol 1e-05"), std::string::npos) << out;
}
