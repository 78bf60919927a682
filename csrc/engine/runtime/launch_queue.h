// The CPU device's queue of work, as a CUDA stream is a GPU's: launches and host-to-device
// copies run in the order they were queued, on a thread of the queue's own, so the host goes
// on building the next graph (a training step's next forward, its optimizer) while the
// kernels run. Each piece of work has a position (1, 2, ...); a host read of a buffer waits
// for the position of the buffer's last writer only, not for the whole queue.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/runtime/device.h"

namespace tiny {

struct QueuedWork {
  LaunchStep launch;                 // a kernel (launch.program set) ...
  std::vector<unsigned char> bytes;  // ... or a copy of these bytes to `copy_to`
  void* copy_to = nullptr;
};

class LaunchQueue {
 public:
  // `run` does one piece of work; it runs on the queue's thread, or on a thread that waits
  // for the work and runs it itself rather than sleep (see wait_for).
  explicit LaunchQueue(std::function<void(QueuedWork&)> run);
  ~LaunchQueue();
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // Queues the work; returns its position. Waits while more than kMaxPending pieces are
  // queued and unfinished.
  static constexpr uint64_t kMaxPending = 4096;
  uint64_t push(QueuedWork&& work);
  // The position of the last work queued, and of the last finished.
  uint64_t queued() const { return queued_.load(std::memory_order_acquire); }
  uint64_t finished() const { return finished_.load(std::memory_order_acquire); }
  bool idle() const { return finished() == queued(); }
  // Returns once the work up to `position` has finished. While the queue's thread is not
  // running work (it sleeps, or is being woken: tens of microseconds in a VM), the caller runs
  // the next piece itself; while it is, the caller sleeps until `position` is reached, never
  // waiting for a later piece. Rethrows the first error work raised since the last one
  // rethrown. On a thread that is running queued work it returns at once: what that work
  // could wait for comes after it.
  void wait_for(uint64_t position);
  // Whether this thread is running queued work now.
  static bool running_here();
  // Whether a host thread waits for queued work now (it has nothing else to do).
  bool host_waits() const { return waiters_.load(std::memory_order_acquire) > 0; }

 private:
  // Runs the oldest queued work; false when there is none, or (`wait` false) when another
  // thread is running a piece.
  bool run_next(bool wait);
  void thread_loop();
  std::function<void(QueuedWork&)> run_;
  std::mutex mu_;           // the deque, the error and the thread's sleep
  std::mutex run_mu_;       // one piece of work at a time, in queue order
  std::condition_variable work_cv_, finished_cv_;
  std::deque<QueuedWork> work_;
  std::atomic<uint64_t> queued_{0}, finished_{0};
  std::atomic<int> waiters_{0};
  std::atomic<uint64_t> wake_at_{UINT64_MAX};  // the lowest position a sleeping waiter waits for
  std::exception_ptr error_;
  bool sleeping_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace tiny
