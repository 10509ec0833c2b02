// Loading token data from files (dataset.h): text read byte-level into an accounted buffer, token
// files (raw uint16, llm.c v1 and v2) memory-mapped and used in place.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/dataset_storage.h"

static_assert(std::endian::native == std::endian::little,
              "remat::data uses little-endian token files in place: a big-endian host would need byte swapping");

namespace remat::data {

using dataset_detail::g_mapped_bytes;
using dataset_detail::kC;

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderInts = 256;
constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);
// Largest file remat tries to map: 2^47 bytes (128 TiB), the user address space of x86-64 and
// arm64 with 4-level page tables. Larger files cannot be mapped whole.
constexpr uint64_t kMaxMapBytes = uint64_t(1) << 47;

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_bin(const std::string& path) {
  return path.size() >= 4 && lower(path.substr(path.size() - 4)) == ".bin";
}

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a readable, non-empty regular file and returns its size; `what` is its role in messages
// ("text file", "token file").
uint64_t open_or_throw(const std::string& path, const std::string& what, Fd& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw Error(kC, what + " '" + path + "' does not exist",
                  "check the --data path, or omit --data to train on the built-in corpus");
    throw Error(kC, "cannot open " + what + " '" + path + "': " + std::strerror(err),
                "check the file's permissions");
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw Error(kC, "cannot read " + what + " '" + path + "': " + std::strerror(errno), "check the file");
  if (S_ISDIR(st.st_mode))
    throw Error(kC, what + " '" + path + "' is a directory, not a file", "pass a file inside it, e.g. train.bin");
  if (!S_ISREG(st.st_mode))
    throw Error(kC, what + " '" + path + "' is not a regular file", "copy the data to a regular file first");
  if (st.st_size <= 0)
    throw Error(kC, what + " '" + path + "' is empty", "it must hold at least one window of tokens");
  return uint64_t(st.st_size);
}

// Reads exactly `bytes` at `offset`.
void pread_exact(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd, p, bytes, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw Error(kC, "reading '" + path + "' failed: " + std::strerror(errno), "check the file and the disk");
    if (r == 0)
      throw Error(kC, "reading '" + path + "' failed before its end", "was the file modified while being read?");
    p += r;
    bytes -= size_t(r);
    offset += uint64_t(r);
  }
}

}  // namespace

const char* format_name(Format f) {
  switch (f) {
    case Format::Auto: return "auto";
    case Format::Text: return "text";
    case Format::U16: return "u16";
    case Format::LlmC: return "llmc";
  }
  return "?";
}

Format parse_format(const std::string& name) {
  const std::string s = lower(name);
  if (s == "auto") return Format::Auto;
  if (s == "text") return Format::Text;
  if (s == "u16" || s == "uint16") return Format::U16;
  if (s == "llmc" || s == "llm.c") return Format::LlmC;
  throw Error(kC, "unknown data format '" + name + "'",
              "use auto (detect), text (byte-level), u16 (raw uint16 array) or llmc (llm.c token file)");
}

TokenDataset TokenDataset::from_text_file(const std::string& path) { return load_file(path, Format::Text, false); }

TokenDataset TokenDataset::from_token_file(const std::string& path) { return load_file(path, Format::Auto, true); }

TokenDataset TokenDataset::load(const std::string& path, Format f) {
  if (!path.empty()) return load_file(path, f, false);
  if (f == Format::Auto || f == Format::Text) return builtin();
  throw Error(kC, std::string("data format ") + format_name(f) + " needs a file, but no data path was given",
              "pass --data FILE, or leave the format on auto to train on the built-in corpus");
}

TokenDataset TokenDataset::load_file(const std::string& path, Format f, bool token_default) {
  const bool bin = ends_with_bin(path);
  const std::string what = f == Format::Text                                                   ? "text file"
                           : (f == Format::U16 || f == Format::LlmC || bin || token_default) ? "token file"
                                                                                             : "data file";
  Fd fd;
  const uint64_t size = open_or_throw(path, what, fd);
  const std::string q = "'" + path + "'";

  // The llm.c magic is the first little-endian int32.
  int32_t first = 0;
  if (size >= sizeof first) pread_exact(fd.fd, &first, sizeof first, 0, path);
  const bool magic = size >= sizeof first && first == kLlmcMagic;
  if (f == Format::Auto) f = magic ? Format::LlmC : (bin || token_default) ? Format::U16 : Format::Text;

  // Maps the whole file read-only.
  auto map_file = [&]() -> std::shared_ptr<const Storage> {
    if (size > kMaxMapBytes || size > std::numeric_limits<size_t>::max())
      throw Error(kC, what + " " + q + " is " + with_commas(size) + " bytes, more than the " +
                          with_commas(kMaxMapBytes) + "-byte address space remat can map",
                  "split the data into smaller files");
    auto st = std::make_shared<Storage>();
    void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      if (err == ENOMEM)
        throw Error(kC, "cannot map " + what + " " + q + " (" + with_commas(size) + " bytes): " + std::strerror(err),
                    "the file is larger than the address space left to this process (see ulimit -v); split it "
                    "into smaller files");
      throw Error(kC, "cannot map " + what + " " + q + " (" + with_commas(size) + " bytes): " + std::strerror(err),
                  "token files are memory-mapped: put the file on a local file system that supports mmap");
    }
    st->base = p;
    st->bytes = size_t(size);
    st->mapped = true;
    g_mapped_bytes.fetch_add(st->bytes, std::memory_order_relaxed);
    return st;
  };

  TokenDataset d;
  switch (f) {
    case Format::Auto:  // resolved above
    case Format::Text: {
      try {
        d = from_buffer(size_t(std::min<uint64_t>(size, std::numeric_limits<size_t>::max())),
                        "text file " + q + " (byte-level, " + with_commas(size) + " tokens)", true, "data.tokens");
      } catch (const Error& e) {  // the allocator's message does not name the file
        std::string why = e.what();
        why = why.substr(0, why.find(" (hint: "));
        throw Error(kC, "text file " + q + " (" + with_commas(size) + " bytes) does not fit in memory as uint32 tokens: " +
                            why,
                    "use a smaller text file, or tokenise it into a .bin token file (memory-mapped, not copied)");
      }
      uint32_t* out = d.mutable_u32();
      std::vector<unsigned char> buf(size_t(std::min<uint64_t>(size, 1 << 16)));
      for (uint64_t i = 0; i < size;) {
        const size_t m = size_t(std::min<uint64_t>(buf.size(), size - i));
        pread_exact(fd.fd, buf.data(), m, i, path);
        std::copy(buf.begin(), buf.begin() + std::ptrdiff_t(m), out + i);
        i += m;
      }
      d.format_ = Format::Text;
      return d;
    }
    case Format::U16: {
      if (size % 2 != 0)
        throw Error(kC, what + " " + q + " has an odd byte count (" + with_commas(size) +
                            "); uint16 token files hold 2 bytes per token",
                    "was it written completely by a nanoGPT/llm.c prepare script? a text file loads with "
                    "--data-format text");
      d.store_ = map_file();
      d.data_ = d.store_->base;
      d.n_ = size_t(size / 2);
      d.width_ = sizeof(uint16_t);
      d.format_ = Format::U16;
      d.desc_ = "raw uint16 token file " + q + " (" + with_commas(d.n_) + " tokens)";
      return d;
    }
    case Format::LlmC: {
      if (!magic) {
        if (size < sizeof first)
          throw Error(kC, what + " " + q + " is not an llm.c token file: at " + with_commas(size) +
                              " bytes it is too short to hold the magic " + std::to_string(kLlmcMagic),
                      "leave the data format on auto, or load it as text (--data-format text)");
        throw Error(kC, what + " " + q + " is not an llm.c token file: it starts with " + std::to_string(first) +
                            ", not the magic " + std::to_string(kLlmcMagic),
                    "load a raw uint16 array with --data-format u16, text with --data-format text, or leave the "
                    "format on auto");
      }
      if (size < kLlmcHeaderBytes)
        throw Error(kC, "llm.c token file " + q + " has a truncated header: the file is " + with_commas(size) +
                            " bytes, shorter than the " + with_commas(kLlmcHeaderBytes) + "-byte header",
                    "the file is cut short, regenerate it; if it is a raw uint16 array that happens to start with "
                    "the llm.c magic, load it with --data-format u16");
      int32_t header[kLlmcHeaderInts];
      pread_exact(fd.fd, header, kLlmcHeaderBytes, 0, path);
      const int32_t version = header[1];
      if (version != 1 && version != 2)
        throw Error(kC, "token file " + q + " has the llm.c magic but unknown version " + std::to_string(version),
                    "remat reads llm.c version 1 (uint16 tokens, GPT-2) and version 2 (uint32 tokens, e.g. LLaMA 3)");
      const int width = version == 1 ? 2 : 4;
      const std::string v = "llm.c v" + std::to_string(version) + " token file " + q;
      const int64_t count = header[2];
      if (count < 0)
        throw Error(kC, v + ": the header's token count is negative (" + std::to_string(count) + ")",
                    "the header is corrupt; regenerate the file");
      const uint64_t want = kLlmcHeaderBytes + uint64_t(count) * uint64_t(width);
      if (want != size)
        throw Error(kC, v + ": the header says " + with_commas(uint64_t(count)) + " tokens (" + with_commas(want) +
                            " bytes: the " + with_commas(kLlmcHeaderBytes) + "-byte header + " +
                            with_commas(uint64_t(count)) + " x " + std::to_string(width) + ") but the file is " +
                            with_commas(size) + " bytes (" + with_commas(size - kLlmcHeaderBytes) +
                            " bytes follow the header)",
                    "the file is truncated or corrupt; regenerate it");
      if (count == 0)
        throw Error(kC, v + " holds zero tokens", "it must hold at least one window of tokens; regenerate it");
      d.store_ = map_file();
      d.data_ = static_cast<const unsigned char*>(d.store_->base) + kLlmcHeaderBytes;
      d.n_ = size_t(count);
      d.width_ = width;
      d.format_ = Format::LlmC;
      d.desc_ = v + " (" + with_commas(d.n_) + (width == 2 ? " uint16" : " uint32") + " tokens)";
      return d;
    }
  }
  throw Error(kC, "unknown data format " + std::to_string(int(f)), "use auto, text, u16 or llmc");
}

}  // namespace remat::data
