// A View is one strided window (shape, strides, offset, optional validity mask)
// onto the row-major index space below it. A ShapeTracker stacks Views; every
// movement op (reshape, permute, expand, pad, shrink, flip, as_strided) is a
// new ShapeTracker, never a copy.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/shape/small_vector.h"
#include "engine/shape/symbolic.h"

namespace tiny {

class TextOut;

// (inline up to 6 dims: see small_vector.h)
using Shape = SmallVector<int64_t, 6>;
using Ranges = SmallVector<std::pair<int64_t, int64_t>, 6>;  // per dim [begin, end)

int64_t numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);
void print_shape(std::ostream& os, const Shape& s);  // shape_str into a stream
void print_shape(TextOut& os, const Shape& s);
// Per-dim indices of the row-major element `flat` of `shape` (all zero when
// the shape is empty: nothing is read there).
std::vector<Expr> unflatten(const Expr& flat, const Shape& shape);

struct View {
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  std::optional<Ranges> mask;  // elements outside read as zero

  static View contiguous(const Shape& shape);
  static View make(Shape shape, Shape strides, int64_t offset, std::optional<Ranges> mask);
  bool is_contiguous() const;
  bool operator==(const View& o) const;
  // Flat index into the space below, and whether the element is valid.
  std::pair<Expr, Expr> index_valid(const std::vector<Expr>& idxs) const;
};

// A shape tracker's views, the last one outermost (inline: most trackers have one)
using Views = SmallVector<View, 1>;

class ShapeTracker {
 public:
  ShapeTracker() = default;
  explicit ShapeTracker(Views views) : views_(std::move(views)) {}
  static ShapeTracker from_shape(const Shape& shape) { return ShapeTracker({View::contiguous(shape)}); }

  const Shape& shape() const { return views_.back().shape; }
  const Views& views() const { return views_; }
  bool is_contiguous() const { return views_.size() == 1 && views_[0].is_contiguous(); }
  bool masked() const;  // whether any view has a validity mask
  bool operator==(const ShapeTracker& o) const { return views_ == o.views_; }

  ShapeTracker reshape(const Shape& shape) const;
  ShapeTracker permute(const std::vector<int>& order) const;
  ShapeTracker expand(const Shape& shape) const;
  ShapeTracker pad(const Ranges& pads) const;      // (before, after) per dim
  ShapeTracker shrink(const Ranges& ranges) const;  // [begin, end) per dim
  ShapeTracker flip(const std::vector<bool>& dims) const;
  // A strided window onto the row-major elements of this tracker's shape.
  ShapeTracker as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // This tracker applied on top of `below` (whose shape must be our base shape).
  ShapeTracker compose_onto(const ShapeTracker& below) const;
  // The elements [*lo, *hi) of a base of `numel` elements that this tracker can reach (its
  // innermost view's span, masks aside), and the tracker rebased to index them from *lo.
  // False where the span leaves the base, or covers all of it.
  bool window(int64_t numel, int64_t* lo, int64_t* hi, ShapeTracker* rebased) const;

  // Index into the flat base and validity for
  // the given per-dim indices of shape().
  std::pair<Expr, Expr> index_valid(const std::vector<Expr>& idxs) const;
  // Reference evaluation for tests: -1 when the element is masked out.
  int64_t eval_index(const std::vector<int64_t>& idx) const;
  size_t hash() const;
  std::string str() const;
  void print(std::ostream& os) const;  // str() into a stream
  void print(TextOut& os) const;  // the same text (graph keys)

 private:
  Views views_;
};

}  // namespace tiny
