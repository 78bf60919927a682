// Compiled programs kept on disk between processes: $TINY_CACHE_DIR or
// ~/.cache/torch_tiny, one folder per compiler and target; TINY_NO_DISK_CACHE=1
// turns it off. Files are written under a temporary name and renamed, so
// processes sharing the folder never read half a file.
#pragma once
#include <string>

namespace tiny {

// The folder for `sub` (created), or "" when the disk cache is off.
std::string disk_cache_dir(const std::string& sub);
// 16 hex digits naming `text` (FNV-1a, the same in every process).
std::string content_hash(const std::string& text);
bool read_file(const std::string& path, std::string& out);
// Writes `data` to `path` atomically; false when the folder cannot be written.
bool write_file_atomic(const std::string& path, const std::string& data);

}  // namespace tiny
