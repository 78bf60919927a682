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
  // the VM's host stalls for a while no longer holds the others up. At most `threads`
  // threads take part (0: all).
  void parallel_for(int64_t n, int64_t min_slice, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t grain = 1, int per_thread = 1, int threads = 0);
  // Calls fn(i) for every i in [0, n), each thread taking the next i when it is free (tasks
  // whose costs differ by orders of magnitude, such as compiles). The first exception thrown
  // is rethrown after all tasks ran.
  void for_each_task(size_t n, const std::function<void(size_t)>& fn);

 private:
  void worker_loop();
  // Runs slices of job `generation` until none is left to take; false if that job is over.
  void run_slices(uint32_t generation);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex run_mu_;  // one parallel_for at a time
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> slices_;
  // The job's generation (32 bits), its slice count and the next slice to take (16 bits each),
  // in one word: a thread takes a slice by one compare-and-swap that also checks the job is
  // still the one it woke for, so the caller never waits for a worker that has not woken yet
  // (it takes that worker's slices itself), and a worker waking late takes none of the next
  // job's slices before they are there. Written under mu_ for a new job (waiters sleep on it).
  std::atomic<uint64_t> job_word_{0};
  std::atomic<size_t> slices_done_{0};
  std::atomic<int> seats_{0};  // workers that may still join the job
  bool stop_ = false;
};

ThreadPool& thread_pool();

}  // namespace tiny
