#include "engine/runtime/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tiny {

namespace {

// A caller waiting for the slices its workers took spins this long before it sleeps: they
// finish microseconds later, and waking a thread blocked on a futex costs tens of
// microseconds in a VM. Idle workers do not spin: the caller takes the slices of a worker that
// has not woken yet (see run_slices), and a worker spinning for the next job on a VM's 2 vCPUs
// cost the host's thread more than it saved its kernels (alternating runs: an LSTM training step
// 2.3-2.8 ms without, 3.2-4.1 with; MobileNetV2's 12.6-16.5 against 15.5-20).
constexpr auto kSpin = std::chrono::microseconds(50);

template <typename Ready>
void spin_until(Ready ready) {
  auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1; !ready(); i++) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; i++) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {
uint32_t generation_of(uint64_t word) { return uint32_t(word >> 32); }
}  // namespace

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_of(job_word_.load()) != seen; });
      if (stop_) return;
      seen = generation_of(job_word_.load());
    }
    if (seats_.fetch_sub(1, std::memory_order_acq_rel) > 0) run_slices(seen);
  }
}

void ThreadPool::run_slices(uint32_t generation) {
  uint64_t word = job_word_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t next = word & 0xffff, count = (word >> 16) & 0xffff;
    if (generation_of(word) != generation || next >= count) return;
    if (!job_word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) continue;
    const auto [begin, end] = slices_[next];
    if (begin < end) (*job_)(begin, end);
    if (slices_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
      std::lock_guard<std::mutex> g(mu_);
      done_cv_.notify_all();
    }
    word = job_word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_slice, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain, int per_thread, int threads) {
  if (n <= 0) return;
  threads = threads > 0 ? std::min(threads, size()) : size();
  const int64_t most = std::min<int64_t>(0xffff, int64_t(threads) * std::max(1, per_thread));
  int64_t parts = std::min<int64_t>(most, std::max<int64_t>(1, n / std::max<int64_t>(1, min_slice)));
  if (parts <= 1 || threads <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run(run_mu_);
  slices_.clear();
  int64_t chunk = (n + parts - 1) / parts;
  chunk = (chunk + grain - 1) / grain * grain;
  for (int64_t at = 0; at < n; at += chunk) slices_.push_back({at, std::min(n, at + chunk)});
  job_ = &fn;
  slices_done_ = 0;
  seats_.store(threads - 1, std::memory_order_relaxed);
  const uint32_t generation = generation_of(job_word_.load()) + 1;
  {
    std::lock_guard<std::mutex> g(mu_);
    job_word_.store(uint64_t(generation) << 32 | uint64_t(slices_.size()) << 16, std::memory_order_release);
  }
  cv_.notify_all();
  run_slices(generation);
  auto all_done = [&] { return slices_done_.load(std::memory_order_acquire) == slices_.size(); };
  spin_until(all_done);
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, all_done);
}

void ThreadPool::for_each_task(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  parallel_for(std::min<int64_t>(size(), int64_t(n)), 1, [&](int64_t, int64_t) {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

ThreadPool& thread_pool() {
  static ThreadPool pool([] {
    if (const char* t = std::getenv("TINY_THREADS")) return std::max(1, std::atoi(t));
    return std::max(1, int(std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace tiny
