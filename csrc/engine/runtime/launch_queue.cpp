#include "engine/runtime/launch_queue.h"

#include <algorithm>
#include <utility>

namespace tiny {

namespace {
thread_local int running_work = 0;  // > 0 while this thread runs queued work
}  // namespace

bool LaunchQueue::running_here() { return running_work > 0; }

LaunchQueue::LaunchQueue(std::function<void(QueuedWork&)> run) : run_(std::move(run)) {
  thread_ = std::thread([this] { thread_loop(); });
}

LaunchQueue::~LaunchQueue() {
  wait_for(queued());
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t LaunchQueue::push(QueuedWork&& work) {
  bool wake;
  uint64_t position;
  {
    std::lock_guard<std::mutex> g(mu_);
    work_.push_back(std::move(work));
    position = queued_.load(std::memory_order_relaxed) + 1;
    queued_.store(position, std::memory_order_release);
    wake = sleeping_;
    sleeping_ = false;
  }
  if (wake) work_cv_.notify_one();
  // A host that never waits (a loop that logs no loss) would queue without bound, and hold
  // every staged copy: past kMaxPending pieces it waits for the older half, as a CUDA
  // launch blocks when the stream's queue is full.
  if (position - finished() > kMaxPending) wait_for(position - kMaxPending / 2);
  return position;
}

bool LaunchQueue::run_next(bool wait) {
  std::unique_lock<std::mutex> order(run_mu_, std::defer_lock);
  if (wait) order.lock();
  else if (!order.try_lock()) return false;
  QueuedWork work;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (work_.empty()) return false;
    work = std::move(work_.front());
    work_.pop_front();
  }
  running_work++;
  try {
    run_(work);
  } catch (...) {
    std::lock_guard<std::mutex> g(mu_);
    if (!error_) error_ = std::current_exception();
  }
  running_work--;
  // Sequentially consistent with wait_for's store of wake_at_ and load of finished_: one of
  // the two sees the other's write. A helper always wakes the sleepers: it may stop helping
  // before their positions (the queue's thread then runs the rest, but a forked child has none).
  if (finished_.fetch_add(1) + 1 >= wake_at_.load() || !wait) {
    std::lock_guard<std::mutex> g(mu_);
    wake_at_ = UINT64_MAX;
    finished_cv_.notify_all();
  }
  return true;
}

void LaunchQueue::wait_for(uint64_t position) {
  if (running_here()) return;
  position = std::min(position, queued());  // a position past the end: everything queued
  if (finished() < position) {
    waiters_++;
    while (finished() < position) {
      if (run_next(false)) continue;
      // Another thread runs a piece: sleep until the piece at `position` has finished.
      std::unique_lock<std::mutex> l(mu_);
      wake_at_ = std::min<uint64_t>(wake_at_, position);
      if (finished_.load() >= position) break;
      finished_cv_.wait(l);
    }
    waiters_--;
  }
  std::lock_guard<std::mutex> g(mu_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void LaunchQueue::thread_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      while (work_.empty() && !stop_) {
        sleeping_ = true;
        work_cv_.wait(l);
      }
      if (stop_ && work_.empty()) return;
    }
    run_next(true);
  }
}

}  // namespace tiny
