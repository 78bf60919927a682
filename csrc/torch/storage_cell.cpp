#include "torch/storage_cell.h"

#include <sys/mman.h>

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace torch_tiny {
namespace {

std::mutex& registry_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
// The live cells in creation order, a list through the cells themselves (every op makes a
// cell and most drop one: no allocation here); under registry_mutex
StorageCell* first_cell = nullptr;
StorageCell* last_cell = nullptr;

// Reserved address space: PROT_NONE, never backed; ranges are recycled by size.
class AddressSpace {
 public:
  AddressSpace() {
    size_ = size_t(1) << 44;  // 16 TiB of addresses, no memory
    void* p = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(p != MAP_FAILED, "tiny: could not reserve address space");
    base_ = static_cast<char*>(p);
  }
  void* take(size_t nbytes) {
    size_t size = round(nbytes);
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
    TORCH_CHECK(used_ + size <= size_, "tiny: out of device address space");
    void* p = base_ + used_;
    used_ += size;
    return p;
  }
  void give(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> g(mu_);
    free_[round(nbytes)].push_back(p);
  }

 private:
  static size_t round(size_t n) { return ((n ? n : 1) + 63) & ~size_t(63); }
  std::mutex mu_;
  char* base_ = nullptr;
  size_t size_ = 0, used_ = 0;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size; the lists keep their capacity
};

AddressSpace& address_space() {
  static auto* a = new AddressSpace();
  return *a;
}

struct CellContext {
  StorageCell cell;
  void* addr;
  explicit CellContext(size_t n) : cell(n), addr(address_space().take(n)) {}
  ~CellContext() { address_space().give(addr, cell.nbytes()); }
};

void delete_cell(void* ctx) {
  auto* c = static_cast<CellContext*>(ctx);
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
  delete c;
}

}  // namespace

StorageCell::StorageCell(size_t nbytes) : nbytes_(nbytes) {
  std::lock_guard<std::mutex> g(registry_mutex());
  prev_ = last_cell;
  (prev_ ? prev_->next_ : first_cell) = this;
  last_cell = this;
}

StorageCell::~StorageCell() {
  std::lock_guard<std::mutex> g(registry_mutex());
  (prev_ ? prev_->next_ : first_cell) = next_;
  (next_ ? next_->prev_ : last_cell) = prev_;
}

tiny::Tensor StorageCell::flat() const {
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());  // (readers on several threads)
  if (!value_.defined() && whole_.defined()) value_ = whole_.reshape({whole_.numel()});
  return value_;
}

tiny::Tensor StorageCell::value_as(tiny::DType dtype) const {
  int64_t n = int64_t(nbytes_ / tiny::itemsize(dtype));
  const tiny::Tensor value = flat();
  if (!value.defined()) return tiny::Tensor::full({n}, tiny::Scalar::from_int(0), dtype);
  if (value.dtype() == dtype) return value;
  tiny::Tensor v = value.bitcast(dtype);
  if (v.numel() != n) v = v.shrink({{0, n}});
  return v;
}

void StorageCell::set_value(tiny::Tensor v) {
  TORCH_INTERNAL_ASSERT(v.ndim() == 1, "tiny: a storage value must be flat");
  TORCH_INTERNAL_ASSERT(size_t(v.numel()) * tiny::itemsize(v.dtype()) <= nbytes_ || v.numel() == 0);
  value_ = std::move(v);
  whole_ = last_read_ = tiny::Tensor();
}

bool StorageCell::pending() const {
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
  if (whole_.defined()) return !whole_.node()->realized() && !(value_.defined() && value_.node()->realized());
  return value_.defined() && !value_.node()->realized();
}

void StorageCell::set_whole(tiny::Tensor v) {
  TORCH_INTERNAL_ASSERT(size_t(v.numel()) * tiny::itemsize(v.dtype()) == nbytes_, "tiny: a whole value must cover its storage");
  whole_ = std::move(v);
  value_ = last_read_ = tiny::Tensor();
}

tiny::Tensor StorageCell::read_whole(tiny::DType dtype, const tiny::Shape& sizes) const {
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());  // (readers on several threads)
  // Before anything made the flat value (a strided read, a synchronize), the whole value as it
  // is; not a pending view, whose reads through the flat value read what its realization stored.
  if (whole_.defined() && !value_.defined() && whole_.dtype() == dtype && whole_.shape() == sizes &&
      !(whole_.node()->op == tiny::Op::View && !whole_.node()->realized()))
    return whole_;
  // After, through the flat value, as before it was made lazily: a step's graph must not
  // change with which of the two ways a read took.
  const tiny::Tensor value = flat();
  const bool realized = value.defined() && value.node()->realized();
  if (last_read_.defined() && last_read_realized_ == realized && last_read_.dtype() == dtype &&
      last_read_.shape() == sizes)
    return last_read_;
  last_read_ = value_as(dtype).reshape(sizes);
  last_read_realized_ = realized;
  return last_read_;
}

StorageCell& cell_of(const c10::Storage& storage) {
  void* ctx = storage.data_ptr().get_context();
  TORCH_CHECK(ctx != nullptr && storage.data_ptr().get_deleter() == &delete_cell,
              "tiny: tensor storage does not belong to the tiny device");
  return static_cast<CellContext*>(ctx)->cell;
}

std::vector<tiny::Tensor> pending_cell_values() {
  std::vector<tiny::Tensor> pending;
  std::lock_guard<std::mutex> g(registry_mutex());
  for (StorageCell* c = first_cell; c; c = c->next_)  // creation order
    if (c->pending()) pending.push_back(c->raw_value());
  return pending;
}

void drop_realized_wholes() {
  std::lock_guard<std::mutex> g(registry_mutex());  // (the two in pending_cell_values' order)
  std::lock_guard<std::recursive_mutex> e(tiny::engine_mutex());
  // (whole_ is read only while value_ is undefined: flat(), read_whole())
  for (StorageCell* c = first_cell; c; c = c->next_)
    if (c->whole_.defined() && c->value_.defined() && c->value_.node()->realized()) c->whole_ = tiny::Tensor();
}

c10::DataPtr TinyAllocator::allocate(size_t nbytes) {
  auto* ctx = new CellContext(nbytes);
  return c10::DataPtr(ctx->addr, ctx, &delete_cell, c10::Device(c10::DeviceType::PrivateUse1, 0));
}

void TinyAllocator::copy_data(void* dest, const void* src, size_t count) const {
  TORCH_CHECK(false, "tiny: storages are lazy and cannot be memcpy'd; copy tensors instead");
}

TinyAllocator* tiny_allocator() {
  static TinyAllocator a;
  return &a;
}

}  // namespace torch_tiny
