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

// Kernels are launched microseconds apart, and waking a thread blocked on a
// futex costs tens of microseconds in a VM (a 64x32 -> 64 linear took 90 us
// on 2 threads, 25 us on 1): waiters spin this long before they sleep.
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

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_slices();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::run_slices() {
  for (size_t i; (i = next_slice_.fetch_add(1)) < slices_.size();)
    if (slices_[i].first < slices_[i].second) (*job_)(slices_[i].first, slices_[i].second);
}

void ThreadPool::parallel_for(int64_t n, int64_t min_slice, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain, int per_thread) {
  if (n <= 0) return;
  const int64_t most = int64_t(size()) * std::max(1, per_thread);
  int64_t parts = std::min<int64_t>(most, std::max<int64_t>(1, n / std::max<int64_t>(1, min_slice)));
  if (parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run(run_mu_);
  {
    std::lock_guard<std::mutex> g(mu_);
    slices_.clear();
    int64_t chunk = (n + parts - 1) / parts;
    chunk = (chunk + grain - 1) / grain * grain;
    for (int64_t at = 0; at < n; at += chunk) slices_.push_back({at, std::min(n, at + chunk)});
    next_slice_ = 0;
    job_ = &fn;
    pending_ = int(workers_.size());
    generation_++;
  }
  cv_.notify_all();
  run_slices();
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [&] { return pending_ == 0; });
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
