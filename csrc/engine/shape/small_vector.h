// A vector that keeps up to N elements inline, for shapes, strides, masks and a shape
// tracker's views: a training step builds thousands of views, each with a few of these, and
// as std::vectors they were most of the heap allocations of building its graph (an LSTM
// step: 13 per node made). The engine's graph layer links nothing but the C++
// library, so this is written here rather than taken from LLVM or c10.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace tiny {

template <class T, size_t N>
class SmallVector {
 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() = default;
  explicit SmallVector(size_t n, const T& v = T()) { assign(n, v); }
  SmallVector(std::initializer_list<T> l) { assign(l.begin(), l.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: from the torch layer
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  ~SmallVector() { release(); }

  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> l) {
    assign(l.begin(), l.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T* cbegin() const { return data_; }
  const T* cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T& at(size_t i) const { return const_cast<SmallVector*>(this)->at(i); }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    T* p = static_cast<T*>(::operator new(n * sizeof(T)));
    std::uninitialized_move(begin(), end(), p);
    std::destroy(begin(), end());
    if (on_heap()) ::operator delete(data_);
    data_ = p;
    cap_ = n;
  }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }
  void resize(size_t n, const T& v = T()) {
    if (n < size_) {
      std::destroy(begin() + n, end());
    } else {
      const T copy = v;  // (v may live in this vector)
      reserve(n);
      std::uninitialized_fill(end(), begin() + n, copy);
    }
    size_ = n;
  }
  void assign(size_t n, const T& v) {
    const T copy = v;
    clear();
    resize(n, copy);
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    if (overlaps(first, last)) {  // (a range of this vector)
      *this = SmallVector(first, last);
      return;
    }
    clear();
    reserve(size_t(std::distance(first, last)));
    size_ = size_t(std::uninitialized_copy(first, last, data_) - data_);
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == cap_) {
      T value(std::forward<Args>(args)...);  // (the arguments may live in this vector)
      reserve(std::max<size_t>(2 * cap_, 1));
      new (end()) T(std::move(value));
    } else {
      new (end()) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void pop_back() {
    std::destroy_at(&back());
    size_--;
  }

  T* insert(const T* pos, const T& v) { return insert(pos, size_t(1), v); }
  T* insert(const T* pos, size_t n, const T& v) {
    SmallVector added(n, v);
    return insert(pos, added.begin(), added.end());
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  T* insert(const T* pos, It first, It last) {
    const size_t at = size_t(pos - data_);
    SmallVector added(first, last);  // (first: the range may lie in this vector)
    SmallVector r;
    r.reserve(size_ + added.size());
    for (size_t i = 0; i < at; i++) r.push_back(std::move(data_[i]));
    for (T& a : added) r.push_back(std::move(a));
    for (size_t i = at; i < size_; i++) r.push_back(std::move(data_[i]));
    *this = std::move(r);
    return data_ + at;
  }
  T* insert(const T* pos, std::initializer_list<T> l) { return insert(pos, l.begin(), l.end()); }
  T* erase(const T* pos) { return erase(pos, pos + 1); }
  T* erase(const T* first, const T* last) {
    T* f = data_ + (first - data_);
    T* new_end = std::move(data_ + (last - data_), end(), f);
    std::destroy(new_end, end());
    size_ = size_t(new_end - data_);
    return f;
  }
  void swap(SmallVector& o) {
    SmallVector t = std::move(o);
    o = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  T* inline_data() { return reinterpret_cast<T*>(inline_); }
  bool on_heap() const { return data_ != reinterpret_cast<const T*>(inline_); }
  template <class It>
  bool overlaps(It first, It last) const {
    if constexpr (std::is_pointer_v<It>) {
      return first != last && std::less_equal<const void*>()(data_, first) &&
             std::less<const void*>()(first, data_ + size_);
    } else {
      return false;
    }
  }
  void release() {
    clear();
    if (on_heap()) ::operator delete(data_);
    data_ = inline_data();
    cap_ = N;
  }
  // o's elements into this empty, inline vector; o left empty
  void take(SmallVector& o) {
    if (o.on_heap()) {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_data();
      o.cap_ = N;
    } else {
      std::uninitialized_move(o.begin(), o.end(), data_);
      std::destroy(o.begin(), o.end());
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  T* data_ = inline_data();
  uint32_t size_ = 0;
  uint32_t cap_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

}  // namespace tiny
