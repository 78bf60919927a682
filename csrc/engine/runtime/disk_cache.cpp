#include "engine/runtime/disk_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tiny {

std::string disk_cache_dir(const std::string& sub) {
  const char* off = std::getenv("TINY_NO_DISK_CACHE");
  if (off && *off && std::string(off) != "0") return "";
  std::string root;
  if (const char* d = std::getenv("TINY_CACHE_DIR")) {
    root = d;
  } else {
    const char* home = std::getenv("HOME");
    root = std::string(home ? home : "/tmp") + "/.cache/torch_tiny";
  }
  std::string dir = root + "/" + sub;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return ec ? "" : dir;
}

std::string content_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

bool write_file_atomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return false;
    f.write(data.data(), std::streamsize(data.size()));
    if (!f) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

}  // namespace tiny
