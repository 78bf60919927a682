#include "engine/runtime/launch_queue.h"

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
  return position;
}

bool LaunchQueue::run_next() {
  std::lock_guard<std::mutex> order(run_mu_);
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
  finished_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

void LaunchQueue::wait_for(uint64_t position) {
  if (running_here()) return;
  // run_next blocks while the queue's thread runs a piece of work, and finds the queue empty
  // only when everything queued has finished.
  if (finished() < position) {
    waiters_++;
    while (finished() < position && run_next()) {
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
    run_next();
  }
}

}  // namespace tiny
