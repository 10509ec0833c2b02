#include "core/fingerprint.h"

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace remat {

namespace {

std::string hex64(uint64_t h) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)h);
  return b;
}

}  // namespace

std::string Fingerprint::describe() const {
  if (empty()) return "nothing recorded";
  return with_commas(bytes) + " bytes, xxh3 " + xxh3;
}

Fingerprint fingerprint_bytes(const void* data, size_t bytes) {
  return {uint64_t(bytes), hex64(XXH3_64bits(data, bytes))};
}

Fingerprint fingerprint_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw Error("io", "cannot read the " + what + " " + quote_name(path) + ": " + std::strerror(err),
                "check that it exists and is readable");
  }
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  std::vector<unsigned char> buf(size_t(1) << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error("io", "reading the " + what + " " + quote_name(path) + " failed: " + std::strerror(err),
                  "check the disk and the file");
    }
    if (n == 0) break;
    XXH3_64bits_update(st.get(), buf.data(), size_t(n));
    total += uint64_t(n);
  }
  ::close(fd);
  return {total, hex64(XXH3_64bits_digest(st.get()))};
}

}  // namespace remat
