// The CPU device's queue: work runs in the order it was queued, a host read waits for the
// buffer's last writer and not for later work, a copy into memory that queued work still
// uses waits its turn, and an error raised by queued work reaches the next wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/device.h"
#include "engine/runtime/launch_queue.h"

using namespace tiny;

namespace {

using Clock = std::chrono::steady_clock;

// Copies args[1] (int32 x n) into args[0], after `gate` opens (when it has one).
struct CopyProgram final : Program {
  int64_t n;
  std::atomic<bool>* gate;
  mutable std::atomic<int> runs{0};  // finished runs
  CopyProgram(int64_t n, std::atomic<bool>* gate) : n(n), gate(gate) { name = "test_copy"; }
  void run(void** args, int64_t begin, int64_t end) const override {
    if (gate) {
      auto until = Clock::now() + std::chrono::seconds(20);  // a failing test must not hang
      while (!gate->load() && Clock::now() < until) std::this_thread::yield();
    }
    if (begin == 0 && end > 0) std::memcpy(args[0], args[1], size_t(n) * 4);
    runs++;
  }
};

// Launches `program` writing `dst` from `src` on the CPU device and records the writer.
void launch_copy(const Program& program, Buffer& dst, Buffer& src) {
  Device& cpu = *cpu_device();
  cpu.launch(LaunchStep(&program, {dst.ptr(), src.ptr()}, {}));
  dst.mark_written(cpu.queued_position());
}

std::vector<int32_t> read(Buffer& b) {
  std::vector<int32_t> out(size_t(b.numel()));
  b.copy_out(out.data(), b.nbytes());
  return out;
}

}  // namespace

TEST(LaunchQueue, RunsWorkInOrderAndWaitsForAPosition) {
  std::vector<int> ran;
  std::mutex mu;
  LaunchQueue q([&](QueuedWork& w) {
    std::lock_guard<std::mutex> g(mu);
    ran.push_back(int(w.bytes.at(0)));
  });
  for (int i = 0; i < 200; i++) {
    QueuedWork w;
    w.bytes = {static_cast<unsigned char>(i)};
    EXPECT_EQ(q.push(std::move(w)), uint64_t(i + 1));
  }
  q.wait_for(50);
  EXPECT_GE(q.finished(), 50u);
  q.wait_for(q.queued());
  EXPECT_TRUE(q.idle());
  std::lock_guard<std::mutex> g(mu);
  ASSERT_EQ(ran.size(), 200u);
  for (int i = 0; i < 200; i++) EXPECT_EQ(ran[size_t(i)], i);
}

// A waiter that arrives while the queue's thread runs a piece sleeps until its own position
// and is not held up by the piece the thread takes next.
TEST(LaunchQueue, AWaiterDoesNotWaitForALaterPiece) {
  std::atomic<bool> started[2] = {false, false}, gate[2] = {false, false}, done[2] = {false, false};
  LaunchQueue q([&](QueuedWork& w) {
    int i = w.bytes.at(0);
    started[i] = true;
    auto until = Clock::now() + std::chrono::seconds(20);
    while (!gate[i] && Clock::now() < until) std::this_thread::yield();
    done[i] = true;
  });
  for (unsigned char i : {0, 1}) {
    QueuedWork w;
    w.bytes = {i};
    q.push(std::move(w));
  }
  while (!started[0]) std::this_thread::yield();  // the queue's thread runs piece 1
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate[0] = true;
  });
  q.wait_for(1);
  EXPECT_TRUE(done[0]);
  EXPECT_FALSE(done[1]);  // returned although piece 2 has not run
  opener.join();
  gate[1] = true;
  q.wait_for(q.queued());
  EXPECT_TRUE(done[1]);
}

TEST(LaunchQueue, APushWaitsWhenTooMuchIsPending) {
  std::atomic<bool> gate{false};
  LaunchQueue q([&](QueuedWork&) {
    auto until = Clock::now() + std::chrono::seconds(20);
    while (!gate && Clock::now() < until) std::this_thread::yield();
  });
  for (uint64_t i = 0; i < LaunchQueue::kMaxPending; i++) q.push(QueuedWork());
  EXPECT_EQ(q.finished(), 0u);  // nothing ran: the first piece waits for the gate
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate = true;
  });
  auto start = Clock::now();
  q.push(QueuedWork());  // one past the bound: returns once the older half has run
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(40));
  EXPECT_GE(q.finished(), LaunchQueue::kMaxPending / 2);
  opener.join();
  q.wait_for(q.queued());
}

TEST(LaunchQueue, AnErrorReachesTheNextWaitOnce) {
  LaunchQueue q([](QueuedWork& w) {
    if (w.bytes.at(0) == 1) throw std::runtime_error("kernel failed");
  });
  for (unsigned char v : {0, 1, 0}) {
    QueuedWork w;
    w.bytes = {v};
    q.push(std::move(w));
  }
  EXPECT_THROW(q.wait_for(q.queued()), std::runtime_error);
  EXPECT_EQ(q.finished(), 3u);  // the work after the error ran too
  EXPECT_NO_THROW(q.wait_for(q.queued()));
}

TEST(LaunchQueue, AHostReadWaitsForTheBuffersWriterOnly) {
  Device& cpu = *cpu_device();
  constexpr int64_t n = 1000;
  std::vector<int32_t> a(n), zeros(n, 0);
  for (int64_t i = 0; i < n; i++) a[size_t(i)] = int32_t(i * 7 - 3);
  Buffer src(&cpu, DType::Int32, n), first(&cpu, DType::Int32, n), second(&cpu, DType::Int32, n);
  src.copy_in(a.data(), src.nbytes());
  second.copy_in(zeros.data(), second.nbytes());
  std::atomic<bool> gate{false};
  CopyProgram now(n, nullptr), held(n, &gate);
  launch_copy(now, first, src);
  launch_copy(held, second, first);  // waits for the gate
  EXPECT_EQ(read(first), a);
  EXPECT_EQ(held.runs.load(), 0);  // the read did not wait for the later kernel
  gate = true;
  EXPECT_EQ(read(second), a);
  cpu.synchronize();
}

TEST(LaunchQueue, ACopyInWaitsForQueuedWorkThatReadsTheMemory) {
  Device& cpu = *cpu_device();
  constexpr int64_t n = 4096;
  std::vector<int32_t> a(n), b(n);
  for (int64_t i = 0; i < n; i++) a[size_t(i)] = int32_t(i), b[size_t(i)] = int32_t(-i);
  Buffer src(&cpu, DType::Int32, n), dst(&cpu, DType::Int32, n);
  src.copy_in(a.data(), src.nbytes());
  std::atomic<bool> gate{false};
  CopyProgram held(n, &gate);
  launch_copy(held, dst, src);  // reads src once the gate opens
  std::vector<int32_t> host = b;
  src.copy_in(host.data(), src.nbytes());  // queued behind the kernel
  std::fill(host.begin(), host.end(), 0);  // copy_in has read its source when it returns
  gate = true;
  EXPECT_EQ(read(dst), a);
  EXPECT_EQ(read(src), b);
}

TEST(LaunchQueue, ABufferWithoutAKnownWriterWaitsForEverything) {
  Device& cpu = *cpu_device();
  constexpr int64_t n = 64;
  std::vector<int32_t> a(n, 5);
  Buffer src(&cpu, DType::Int32, n), dst(&cpu, DType::Int32, n);
  src.copy_in(a.data(), src.nbytes());
  std::atomic<bool> gate{false};
  CopyProgram held(n, &gate);
  cpu.launch(LaunchStep(&held, {dst.ptr(), src.ptr()}, {}));  // writer not recorded
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate = true;
  });
  EXPECT_EQ(read(dst), a);
  opener.join();
}
