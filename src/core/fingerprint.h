// Content fingerprints: what a checkpoint records of its data and of its own files, so that a resume
// notices a changed data file (reversed, truncated, re-tokenised) and a swapped or edited weights or
// optimizer file, while a file that was only moved or copied still matches.
//
// The hash is XXH3-64 (Collet, xxHash 0.8), a non-cryptographic hash at memory speed: it detects
// accidents, not adversaries (a checkpoint folder is trusted as much as the code that reads it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/record_fwd.h"

namespace remat {

struct Fingerprint {
  uint64_t bytes = 0;  // the content's length
  std::string xxh3;    // 16 lowercase hex digits; "" = nothing recorded (no file, or an older checkpoint)

  bool empty() const { return xxh3.empty(); }
  bool operator==(const Fingerprint&) const = default;
  // "1,048,576 bytes, xxh3 0123456789abcdef"
  std::string describe() const;

  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("bytes", s.bytes), v("xxh3", s.xxh3);
  }
};

// The fingerprint of `bytes` bytes at `data`.
Fingerprint fingerprint_bytes(const void* data, size_t bytes);
// The fingerprint of a file's contents, read in chunks (any size). Throws remat::Error("io") naming
// `what` and the path when it cannot be read.
Fingerprint fingerprint_file(const std::string& path, const std::string& what = "file");

}  // namespace remat
