// The tiny random generator: a seed and a Philox counter offset. Random ops
// take (seed, offset) and advance the offset by the number of values drawn,
// so torch.manual_seed makes runs repeatable and no two draws overlap.
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_tiny {

class TinyGenerator final : public c10::GeneratorImpl {
 public:
  TinyGenerator();
  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  // Reserves `n` counters and returns (seed, first counter).
  std::pair<uint64_t, uint64_t> take(uint64_t n);

 private:
  TinyGenerator* clone_impl() const override;
  uint64_t seed_ = 67280421310721ULL;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator();
at::Generator new_generator();
// The generator to use for an op's optional generator argument.
TinyGenerator* get_generator(const std::optional<at::Generator>& gen);

}  // namespace torch_tiny
