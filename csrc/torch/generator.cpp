#include "torch/generator.h"

#include <ATen/ops/empty.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/core/DispatchKeySet.h>

#include <cstring>
#include <random>

namespace torch_tiny {

TinyGenerator::TinyGenerator()
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, 0),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

void TinyGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TinyGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void TinyGenerator::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.numel() == 16 && state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "tiny generator state must be a uint8 tensor of 16 bytes");
  const uint8_t* p = static_cast<const uint8_t*>(state.data());
  std::memcpy(&seed_, p, 8);
  std::memcpy(&offset_, p + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TinyGenerator::get_state() const {
  at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr(), &seed_, 8);
  std::memcpy(static_cast<uint8_t*>(t.data_ptr()) + 8, &offset_, 8);
  return t.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TinyGenerator::take(uint64_t n) {
  std::lock_guard<std::mutex> g(mutex_);
  uint64_t first = offset_;
  offset_ += n;
  return {seed_, first};
}

TinyGenerator* TinyGenerator::clone_impl() const {
  auto* g = new TinyGenerator();
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator() {
  static at::Generator g = at::make_generator<TinyGenerator>();
  return g;
}

at::Generator new_generator() { return at::make_generator<TinyGenerator>(); }

TinyGenerator* get_generator(const std::optional<at::Generator>& gen) {
  const at::Generator& g = gen.has_value() && gen->defined() ? *gen : default_generator();
  TORCH_CHECK(g.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'tiny' device type for generator but found '", g.device().type(), "'");
  return static_cast<TinyGenerator*>(g.unsafeGetGeneratorImpl());
}

}  // namespace torch_tiny
