#include "engine/shape/view.h"
#include "engine/dtype/text_out.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace tiny {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size(), 0);
  int64_t acc = 1;
  for (int i = int(s.size()) - 1; i >= 0; i--) {
    st[i] = s[i] == 1 ? 0 : acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  print_shape(os, s);
  return os.str();
}

namespace {
template <class Out>
void print_shape_to(Out& os, const Shape& s) {
  os << "(";
  for (size_t i = 0; i < s.size(); i++) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
}
}  // namespace
void print_shape(std::ostream& os, const Shape& s) { print_shape_to(os, s); }
void print_shape(TextOut& os, const Shape& s) { print_shape_to(os, s); }

View View::contiguous(const Shape& shape) { return make(shape, contiguous_strides(shape), 0, std::nullopt); }

View View::make(Shape shape, Shape strides, int64_t offset, std::optional<Ranges> mask) {
  View v;
  // A size-1 dim's stride never matters; zero it so equal views compare equal.
  for (size_t i = 0; i < shape.size(); i++)
    if (shape[i] == 1) strides[i] = 0;
  if (mask) {
    bool full = true, empty = false;
    for (size_t i = 0; i < shape.size(); i++) {
      auto& m = (*mask)[i];
      m.first = std::max<int64_t>(0, std::min(m.first, shape[i]));
      m.second = std::max(m.first, std::min(m.second, shape[i]));
      if (m.first != 0 || m.second != shape[i]) full = false;
      if (m.first == m.second) empty = true;
    }
    if (empty) {
      // Nothing is valid: keep an all-empty mask, data is never read.
      for (size_t i = 0; i < shape.size(); i++) (*mask)[i] = {0, 0};
      std::fill(strides.begin(), strides.end(), 0);
      offset = 0;
    }
    if (full) mask.reset();
  }
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.offset = offset;
  v.mask = std::move(mask);
  return v;
}

bool View::is_contiguous() const {
  return offset == 0 && !mask && strides == contiguous_strides(shape);
}

bool View::operator==(const View& o) const {
  return shape == o.shape && strides == o.strides && offset == o.offset && mask == o.mask;
}

std::pair<Expr, Expr> View::index_valid(const std::vector<Expr>& idxs) const {
  Expr index = cnst(offset);
  Expr valid = cnst(1);
  for (size_t d = 0; d < shape.size(); d++) {
    if (!mask) {
      index = add(index, mul(idxs[d], strides[d]));
      continue;
    }
    auto [b, e] = (*mask)[d];
    // the index is only read where the mask holds: there the coordinate
    // minus the mask's start lies in [0, e - b)
    index = add(index, mul(add(bounded(add(idxs[d], cnst(-b)), 0, e - b), cnst(b)), strides[d]));
    if (b == e) {
      valid = cnst(0);
    } else {
      if (b > 0) valid = land(valid, ge(idxs[d], b));
      if (e < shape[d]) valid = land(valid, lt(idxs[d], e));
    }
  }
  return {index, valid};
}

// Try to express a reshape of one unmasked view as one view (merging and
// splitting dims as PyTorch's view() does); nullopt when it needs a copy.
static std::optional<View> reshape_view(const View& v, const Shape& new_shape) {
  if (v.mask) return std::nullopt;
  // Drop size-1 dims, then match chunks of old dims to chunks of new dims.
  Shape os, ost;
  for (size_t i = 0; i < v.shape.size(); i++)
    if (v.shape[i] != 1) { os.push_back(v.shape[i]); ost.push_back(v.strides[i]); }
  Shape nst(new_shape.size(), 0);
  size_t oi = 0;
  size_t ni = 0;
  while (ni < new_shape.size() || oi < os.size()) {
    if (ni < new_shape.size() && new_shape[ni] == 1) { nst[ni++] = 0; continue; }
    if (oi >= os.size() || ni >= new_shape.size()) return std::nullopt;
    // take a chunk of old dims that are mutually contiguous
    size_t oj = oi;
    int64_t osize = os[oi];
    size_t nj = ni;
    int64_t nsize = new_shape[ni];
    while (osize != nsize) {
      if (osize < nsize) {
        if (++oj >= os.size()) return std::nullopt;
        if (ost[oj - 1] != ost[oj] * os[oj]) return std::nullopt;
        osize *= os[oj];
      } else {
        if (++nj >= new_shape.size()) return std::nullopt;
        nsize *= new_shape[nj];
      }
    }
    // old dims oi..oj are one contiguous run with innermost stride ost[oj]
    int64_t stride = ost[oj];
    for (size_t k = nj + 1; k-- > ni;) {
      nst[k] = new_shape[k] == 1 ? 0 : stride;
      stride *= new_shape[k];
    }
    oi = oj + 1;
    ni = nj + 1;
  }
  return View::make(new_shape, nst, v.offset, std::nullopt);
}

ShapeTracker ShapeTracker::reshape(const Shape& shape) const {
  if (numel(shape) != numel(this->shape())) throw std::invalid_argument("reshape: numel mismatch");
  if (shape == this->shape()) return *this;
  auto views = views_;
  const View& last = views.back();
  if (numel(shape) == 0) {
    views.back() = View::contiguous(shape);
    if (views.size() == 1) return ShapeTracker(std::move(views));
  }
  if (auto nv = reshape_view(last, shape)) {
    views.back() = *nv;
    return ShapeTracker(std::move(views));
  }
  // A masked view whose mask only touches dims kept as they are: reshape the
  // unmasked part and carry the mask along (common for padded then flattened).
  views.push_back(View::contiguous(shape));
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::permute(const std::vector<int>& order) const {
  auto views = views_;
  View& v = views.back();
  Shape sh, st;
  std::optional<Ranges> m;
  if (v.mask) m = Ranges();
  for (int o : order) {
    sh.push_back(v.shape[o]);
    st.push_back(v.strides[o]);
    if (m) m->push_back((*v.mask)[o]);
  }
  v = View::make(sh, st, v.offset, m);
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::expand(const Shape& shape) const {
  auto views = views_;
  View& v = views.back();
  Shape st = v.strides;
  std::optional<Ranges> m = v.mask;
  for (size_t i = 0; i < shape.size(); i++) {
    if (v.shape[i] == shape[i]) continue;
    if (v.shape[i] != 1) throw std::invalid_argument("expand: dim is not 1");
    st[i] = 0;
    if (m) (*m)[i] = (*m)[i].second > (*m)[i].first ? std::make_pair<int64_t, int64_t>(0, int64_t(shape[i])) : std::make_pair<int64_t, int64_t>(0, 0);
  }
  v = View::make(shape, st, v.offset, m);
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::pad(const Ranges& pads) const {
  auto views = views_;
  View& v = views.back();
  Shape sh = v.shape;
  int64_t off = v.offset;
  Ranges m(sh.size());
  bool any = false;
  for (size_t i = 0; i < sh.size(); i++) {
    auto [b, e] = v.mask ? (*v.mask)[i] : std::make_pair<int64_t, int64_t>(0, int64_t(sh[i]));
    m[i] = {b + pads[i].first, e + pads[i].first};
    off -= pads[i].first * v.strides[i];
    sh[i] += pads[i].first + pads[i].second;
    any |= pads[i].first || pads[i].second;
  }
  if (!any) return *this;
  v = View::make(sh, v.strides, off, m);
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::shrink(const Ranges& ranges) const {
  auto views = views_;
  View& v = views.back();
  Shape sh(v.shape.size());
  int64_t off = v.offset;
  std::optional<Ranges> m;
  if (v.mask) m = Ranges(sh.size());
  for (size_t i = 0; i < sh.size(); i++) {
    auto [b, e] = ranges[i];
    sh[i] = e - b;
    off += b * v.strides[i];
    if (m) m->at(i) = {(*v.mask)[i].first - b, (*v.mask)[i].second - b};
  }
  v = View::make(sh, v.strides, off, m);
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::flip(const std::vector<bool>& dims) const {
  auto views = views_;
  View& v = views.back();
  Shape st = v.strides;
  int64_t off = v.offset;
  std::optional<Ranges> m = v.mask;
  for (size_t i = 0; i < dims.size(); i++) {
    if (!dims[i] || v.shape[i] <= 1) continue;
    off += (v.shape[i] - 1) * st[i];
    st[i] = -st[i];
    if (m) (*m)[i] = {v.shape[i] - (*m)[i].second, v.shape[i] - (*m)[i].first};
  }
  v = View::make(v.shape, st, off, m);
  return ShapeTracker(std::move(views));
}

ShapeTracker ShapeTracker::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  auto views = views_;
  // On a plain 1-D contiguous (or unit-stride, unmasked) window the strided
  // window composes directly.
  const View& v = views.back();
  if (v.shape.size() == 1 && !v.mask && (v.strides[0] == 1 || v.shape[0] == 1)) {
    views.back() = View::make(shape, strides, v.offset + offset, std::nullopt);
    return ShapeTracker(std::move(views));
  }
  if (views.size() == 1 && v.is_contiguous()) {
    views.back() = View::make(shape, strides, offset, std::nullopt);
    return ShapeTracker(std::move(views));
  }
  views.push_back(View::make(shape, strides, offset, std::nullopt));
  return ShapeTracker(std::move(views));
}

// Collects e == offset + sum strides[id] * var(id); false when e is not linear.
static bool linear_coeffs(const Expr& e, Shape& strides, int64_t& offset) {
  switch (e->op) {
    case EOp::Const: offset += e->value; return true;
    case EOp::Var: strides[size_t(e->value)] += 1; return true;
    case EOp::Mul:
      if (e->src[0]->op != EOp::Var) return false;
      strides[size_t(e->src[0]->value)] += e->value;
      return true;
    case EOp::Add:
      for (auto& s : e->src)
        if (!linear_coeffs(s, strides, offset)) return false;
      return true;
    case EOp::Bounded: return linear_coeffs(e->src[0], strides, offset);
    default: return false;
  }
}

// `top` (a window onto the row-major elements of below's shape) as one view
// onto below's base, when the composed index is linear over top's valid
// elements (masked-out ones are never read, so their index does not matter).
static std::optional<View> merge_views(const View& below, const View& top) {
  if (below.mask || numel(below.shape) == 0 || numel(top.shape) == 0) return std::nullopt;
  // index d runs over the valid range [b, e) as b + var(d)
  std::vector<Expr> idx;
  for (size_t d = 0; d < top.shape.size(); d++) {
    auto [b, e] = top.mask ? (*top.mask)[d] : std::make_pair<int64_t, int64_t>(0, int64_t(top.shape[d]));
    if (b == e) return std::nullopt;
    idx.push_back(add(var(int(d), e - b), cnst(b)));
  }
  Expr flat = View::make(top.shape, top.strides, top.offset, std::nullopt).index_valid(idx).first;
  if (flat->vmin < 0 || flat->vmax >= numel(below.shape)) return std::nullopt;
  Expr ix = below.index_valid(unflatten(flat, below.shape)).first;
  Shape strides(top.shape.size(), 0);
  int64_t offset = 0;
  if (!linear_coeffs(ix, strides, offset)) return std::nullopt;
  // ix is linear in var(d) = i_d - b_d; make it linear in i_d
  for (size_t d = 0; d < top.shape.size(); d++)
    if (top.mask) offset -= strides[d] * (*top.mask)[d].first;
  return View::make(top.shape, strides, offset, top.mask);
}

ShapeTracker ShapeTracker::compose_onto(const ShapeTracker& below) const {
  ShapeTracker r = below;
  for (size_t i = 0; i < views_.size(); i++) {
    const View& v = views_[i];
    if (i == 0 && v.shape == r.shape() && v.is_contiguous()) continue;
    if (i == 0 && r.views_.size() >= 1) {
      // merge when the lower tracker is a single plain contiguous view
      if (r.views_.size() == 1 && r.views_[0].is_contiguous()) {
        r.views_[0] = v;
        continue;
      }
    }
    r.views_.push_back(v);
  }
  // Simplify: a top view that can be expressed directly on the one below.
  while (r.views_.size() >= 2) {
    const View& top = r.views_.back();
    const View& below_v = r.views_[r.views_.size() - 2];
    if (below_v.mask) break;
    if (top.mask) {
      auto nv = merge_views(below_v, top);
      if (!nv) break;
      r.views_.pop_back();
      r.views_.back() = *nv;
      continue;
    }
    // reshape-compatible: top is a contiguous reinterpretation of below
    if (top.is_contiguous()) {
      if (auto nv = reshape_view(below_v, top.shape)) {
        r.views_.pop_back();
        r.views_.back() = *nv;
        continue;
      }
    }
    // below is 1-D unit-stride: top's strides apply directly
    if (below_v.shape.size() == 1 && below_v.strides[0] == 1) {
      View nv = View::make(top.shape, top.strides, top.offset + below_v.offset, std::nullopt);
      r.views_.pop_back();
      r.views_.back() = nv;
      continue;
    }
    if (below_v.is_contiguous()) {
      // below is row-major: top's flat indices are below's flat indices
      View nv = top;
      r.views_.pop_back();
      r.views_.back() = nv;
      continue;
    }
    if (auto nv = merge_views(below_v, top)) {
      r.views_.pop_back();
      r.views_.back() = *nv;
      continue;
    }
    break;
  }
  return r;
}

std::vector<Expr> unflatten(const Expr& flat, const Shape& shape) {
  std::vector<Expr> sub(shape.size(), cnst(0));
  // No element of an empty shape is ever read; avoid dividing by its zero size.
  if (numel(shape) == 0) return sub;
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    sub[d] = mod(floordiv(flat, acc), shape[d]);
    acc *= shape[d];
  }
  return sub;
}

std::pair<Expr, Expr> ShapeTracker::index_valid(const std::vector<Expr>& idxs) const {
  auto [index, valid] = views_.back().index_valid(idxs);
  for (size_t k = views_.size() - 1; k-- > 0;) {
    const View& v = views_[k];
    if (numel(v.shape) == 0) return {cnst(0), cnst(0)};
    auto [i2, v2] = v.index_valid(unflatten(index, v.shape));
    index = i2;
    valid = land(valid, v2);
  }
  return {index, valid};
}

int64_t ShapeTracker::eval_index(const std::vector<int64_t>& idx) const {
  std::vector<int64_t> cur = idx;
  for (size_t k = views_.size(); k-- > 0;) {
    const View& v = views_[k];
    int64_t flat = v.offset;
    for (size_t d = 0; d < v.shape.size(); d++) {
      if (v.mask && (cur[d] < (*v.mask)[d].first || cur[d] >= (*v.mask)[d].second)) return -1;
      flat += cur[d] * v.strides[d];
    }
    if (k == 0) return flat;
    const Shape& below = views_[k - 1].shape;
    if (numel(below) == 0) return -1;
    cur.assign(below.size(), 0);
    for (size_t d = below.size(); d-- > 0;) {
      cur[d] = flat % below[d];
      flat /= below[d];
    }
  }
  return -1;
}

size_t ShapeTracker::hash() const {
  size_t h = views_.size();
  auto mix = [&](int64_t x) { h ^= std::hash<int64_t>()(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (auto& v : views_) {
    for (auto s : v.shape) mix(s);
    for (auto s : v.strides) mix(s);
    mix(v.offset);
    if (v.mask) for (auto& m : *v.mask) { mix(m.first); mix(m.second); }
  }
  return h;
}

std::string ShapeTracker::str() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

namespace {
template <class Out>
void print_views(Out& os, const Views& views) {
  for (size_t k = 0; k < views.size(); k++) {
    const View& v = views[k];
    os << (k ? " | " : "") << "V";
    print_shape(os, v.shape);
    os << " st";
    print_shape(os, v.strides);
    os << " off=" << v.offset;
    if (v.mask) {
      os << " mask=";
      for (auto& m : *v.mask) os << "[" << m.first << "," << m.second << ")";
    }
  }
}
}  // namespace
void ShapeTracker::print(std::ostream& os) const { print_views(os, views_); }
void ShapeTracker::print(TextOut& os) const { print_views(os, views_); }

bool ShapeTracker::masked() const {
  for (auto& v : views_)
    if (v.mask) return true;
  return false;
}

bool ShapeTracker::window(int64_t numel, int64_t* lo, int64_t* hi, ShapeTracker* rebased) const {
  Views views = views_;
  View& inner = views.front();  // indexes the base's elements
  int64_t first = inner.offset, last = inner.offset;
  for (size_t d = 0; d < inner.shape.size(); d++) {
    if (inner.shape[d] == 0) return false;
    int64_t span = (inner.shape[d] - 1) * inner.strides[d];
    (span < 0 ? first : last) += span;
  }
  if (first < 0 || last + 1 > numel || (first == 0 && last + 1 == numel)) return false;
  inner = View::make(inner.shape, inner.strides, inner.offset - first, inner.mask);
  *lo = first;
  *hi = last + 1;
  *rebased = ShapeTracker(std::move(views));
  return true;
}

}  // namespace tiny
