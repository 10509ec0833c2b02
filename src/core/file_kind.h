// What a file system object is, in the words of a message ("a FIFO", "a folder"): io_policy.cpp and
// atomic_file.cpp name what they refuse with it.
#pragma once
#include <sys/stat.h>

#include <string>

namespace remat {

inline std::string kind_of(mode_t m) {
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISREG(m)) return "a regular file";
  return "a special file";
}

}  // namespace remat
