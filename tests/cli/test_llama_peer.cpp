// remat's LLaMA against an independent implementation: bench/check_llama_peer.py builds tiny
// LLaMAs (GQA, MHA, MQA) as Hugging Face folders, runs `remat grads` and a PyTorch LLaMA in float64
// on the same weights and tokens, and compares the loss and every gradient (1e-5 relative to each
// tensor's largest). Skips when PyTorch (Debian python3-torch) is not installed.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

TEST(LlamaPeer, LossAndEveryGradientAgreeWithPyTorchToOneInAHundredThousand) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const fs::path script = root / "bench" / "check_llama_peer.py";
  if (!fs::exists(script)) GTEST_SKIP() << "no " << script;
  const std::string cmd = "python3 '" + script.string() + "' --remat '" + REMAT_BINARY + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) GTEST_SKIP() << "PyTorch is not installed (apt-get install python3-torch):\n" << out;
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("OK: 3 cases agree within rtol 1e-05"), std::string::npos) << out;
}
