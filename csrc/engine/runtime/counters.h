// Process-wide counters a user or a test can read to see what the engine did.
#pragma once
#include <atomic>
#include <cstdint>

namespace tiny {

struct Counters {
  std::atomic<int64_t> kernels{0};          // kernels launched
  std::atomic<int64_t> copies_in{0};        // host -> device copies
  std::atomic<int64_t> copies_out{0};       // device -> host copies
  // of them, those that waited for their data's writer only, with later work queued on
  std::atomic<int64_t> copies_out_early{0};
  std::atomic<int64_t> bytes_in{0};
  std::atomic<int64_t> bytes_out{0};
  std::atomic<int64_t> schedules{0};        // scheduler runs that built a schedule
  std::atomic<int64_t> schedule_cache_hits{0};
  std::atomic<int64_t> compiles{0};         // kernels compiled (not from a cache)
  std::atomic<int64_t> disk_cache_hits{0};
  std::atomic<int64_t> flops{0};            // estimated
  std::atomic<int64_t> kernel_ns{0};        // time spent running kernels
  std::atomic<int64_t> graph_nodes{0};      // nodes of the graphs realized (what building and keying them cost)

  void reset() {
    kernels = 0; copies_in = 0; copies_out = 0; copies_out_early = 0; bytes_in = 0; bytes_out = 0;
    schedules = 0; schedule_cache_hits = 0; compiles = 0; disk_cache_hits = 0;
    flops = 0; kernel_ns = 0; graph_nodes = 0;
  }
};

Counters& counters();
// TINY_DEBUG level, read once.
int debug_level();

}  // namespace tiny
