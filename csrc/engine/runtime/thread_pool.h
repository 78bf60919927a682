// A fixed pool of worker threads that runs one parallel-for at a time.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tiny {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint slices covering [0, n); the caller works too. Slices
  // start at multiples of `grain` (a kernel's tile of channels), up to `per_thread` per
  // thread, and whichever thread is free takes the next: with several per thread, a thread
  // the VM's host stalls for a while no longer holds the others up.
  void parallel_for(int64_t n, int64_t min_slice, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t grain = 1, int per_thread = 1);
  // Calls fn(i) for every i in [0, n), each thread taking the next i when it is free (tasks
  // whose costs differ by orders of magnitude, such as compiles). The first exception thrown
  // is rethrown after all tasks ran.
  void for_each_task(size_t n, const std::function<void(size_t)>& fn);

 private:
  void worker_loop();
  void run_slices();  // takes slices until none is left
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex run_mu_;  // one parallel_for at a time
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> slices_;
  std::atomic<size_t> next_slice_{0};  // the next slice to take
  // atomic so that waiters can spin on them briefly before sleeping; written under mu_
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

ThreadPool& thread_pool();

}  // namespace tiny
