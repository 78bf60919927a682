// PrivateUse1 plumbing for the single "tiny" device: the device guard (no
// streams: the device runs a lazy graph, ordering is the engine's job), the
// hooks PyTorch asks for generators and device queries, and the allocator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>

#include "engine/runtime/device.h"
#include "torch/generator.h"
#include "torch/storage_cell.h"

namespace torch_tiny {
namespace {

constexpr c10::DeviceType kTiny = c10::DeviceType::PrivateUse1;

struct TinyGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTiny; }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "tiny: only device 0 exists");
    return c10::Device(kTiny, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kTiny, 0); }
  void setDevice(c10::Device d) const override { TORCH_CHECK(d.index() <= 0, "tiny: only device 0 exists"); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTiny, 0)); }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void synchronizeStream(const c10::Stream&) const override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TinyGuardImpl);

// pin_memory() for tiny: host memory from the compute device (page-locked on
// a GPU), so DataLoader(pin_memory=True) and Tensor.pin_memory() behave as
// they do for cuda.
struct PinnedAllocator final : public c10::Allocator {
  static void release(void* p) { tiny::compute_device().host_free(p); }
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? tiny::compute_device().host_alloc(nbytes) : nullptr;
    return c10::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { std::memcpy(dest, src, count); }
};

PinnedAllocator* pinned_allocator() {
  static PinnedAllocator a;
  return &a;
}

struct TinyHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override { return default_generator(); }
  at::Generator getNewGenerator(c10::DeviceIndex) const override { return new_generator(); }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kTiny, 0); }
  bool isPinnedPtr(const void* p) const override { return p && tiny::compute_device().host_pinned(p); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  void setCurrentDevice(c10::DeviceIndex d) const override { TORCH_CHECK(d <= 0, "tiny: only device 0 exists"); }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

[[noreturn]] void raise_out_of_memory(const std::string& message) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}

static bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TinyHooks());
  c10::SetAllocator(kTiny, tiny_allocator());
  tiny::set_out_of_memory_handler(&raise_out_of_memory);  // engine OOM -> torch.OutOfMemoryError
  return true;
}();

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

void TinyHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage, newsize);
}

}  // namespace torch_tiny
