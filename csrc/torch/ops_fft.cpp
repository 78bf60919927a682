// The discrete Fourier transforms ATen's torch.fft functions reduce to:
// _fft_r2c, _fft_c2c, _fft_c2r. Each transformed dim is a matmul with its DFT
// matrix (cos and sin tables made on the host in double, with jk reduced mod n
// so the angles stay exact), computed in float64 and rounded once to the
// result's component type; complex values are (re, im) pairs (storage_only.h).
// A matmul is O(n^2) per transformed vector: the right cost for the short
// transforms of feature code, not for long signals (a Stockham / Bluestein
// FFT is not done).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "torch/pointwise.h"
#include "torch/storage_only.h"

namespace torch_tiny {
namespace {

using namespace pw;
using T = tiny::Tensor;
using tiny::DType;

struct Complex {
  T re, im;  // im undefined: a real signal
};

// The (rows, cols) table f(j, k) for j < rows, k < cols, uploaded as float64.
template <class F>
T table(int64_t rows, int64_t cols, F f) {
  std::vector<double> v(size_t(rows * cols));
  for (int64_t j = 0; j < rows; j++)
    for (int64_t k = 0; k < cols; k++) v[size_t(j * cols + k)] = f(j, k);
  return T::from_host(v.data(), {rows, cols}, DType::Float64);
}
double angle(int64_t j, int64_t k, int64_t n) { return 2 * M_PI * double((j * k) % n) / double(n); }

// x with `axis` moved last and flattened to (rows, length); `restore` undoes it for a new last length.
struct Rows {
  T flat;
  std::vector<int> order;
  tiny::Shape moved;
};
Rows to_rows(const T& x, int axis) {
  Rows r;
  for (int i = 0; i < x.ndim(); i++)
    if (i != axis) r.order.push_back(i);
  r.order.push_back(axis);
  T moved = x.permute(r.order);
  r.moved = moved.shape();
  int64_t len = r.moved.back(), rows = len ? moved.numel() / len : 0;
  r.flat = moved.reshape({rows, len});
  return r;
}
T from_rows(const Rows& r, const T& y) {
  tiny::Shape s = r.moved;
  s.back() = y.shape().back();
  std::vector<int> inverse(r.order.size());
  for (size_t i = 0; i < r.order.size(); i++) inverse[size_t(r.order[i])] = int(i);
  return y.reshape(s).permute(inverse);
}

// y[k] = sum_j x[j] exp(-+ 2 pi i j k / n) along `axis` for k < n_out (forward: minus).
Complex dft(const Complex& x, int axis, int64_t n, int64_t n_out, bool forward) {
  int64_t n_in = x.re.shape()[size_t(axis)];
  double sign = forward ? -1.0 : 1.0;
  T c = table(n_in, n_out, [&](int64_t j, int64_t k) { return std::cos(angle(j, k, n)); });
  T s = table(n_in, n_out, [&](int64_t j, int64_t k) { return sign * std::sin(angle(j, k, n)); });
  Rows re = to_rows(x.re, axis);
  if (!x.im.defined()) return {from_rows(re, re.flat.matmul(c)), from_rows(re, re.flat.matmul(s))};
  Rows im = to_rows(x.im, axis);
  // (a + ib)(c + is) = (ac - bs) + i(as + bc)
  return {from_rows(re, re.flat.matmul(c) - im.flat.matmul(s)), from_rows(re, re.flat.matmul(s) + im.flat.matmul(c))};
}

// The real signal of length n whose one-sided spectrum is x along `axis`
// (Hermitian symmetry supplies the rest; the imaginary parts of the zero and
// Nyquist terms do not contribute, as in pocketfft).
T dft_to_real(const Complex& x, int axis, int64_t n) {
  int64_t n_in = std::min(x.re.shape()[size_t(axis)], n / 2 + 1);
  auto weight = [n](int64_t k) { return k == 0 || 2 * k == n ? 1.0 : 2.0; };
  T c = table(n_in, n, [&](int64_t k, int64_t t) { return weight(k) * std::cos(angle(k, t, n)); });
  T s = table(n_in, n, [&](int64_t k, int64_t t) { return -weight(k) * std::sin(angle(k, t, n)); });
  tiny::Ranges keep;
  for (auto d : x.re.shape()) keep.push_back({0, d});
  keep[size_t(axis)] = {0, n_in};
  Rows re = to_rows(x.re.shrink(keep), axis), im = to_rows(x.im.shrink(keep), axis);
  return from_rows(re, re.flat.matmul(c) + im.flat.matmul(s));
}

std::vector<int> wrapped_dims(const at::Tensor& self, c10::IntArrayRef dim) {
  std::vector<int> out;
  for (int64_t d : dim) out.push_back(int(c10::maybe_wrap_dim(d, self.dim())));
  return out;
}

// ATen's fft_norm_mode: 0 none, 1 1/sqrt(n), 2 1/n, n the signal's element count.
T normalized(const T& x, int64_t normalization, double n) {
  if (normalization == 0 || n == 0) return x;
  return x * (normalization == 1 ? 1.0 / std::sqrt(n) : 1.0 / n);
}

void check_real_fft_input(const at::Tensor& self) {
  c10::ScalarType t = self.scalar_type();
  TORCH_CHECK(t == c10::kFloat || t == c10::kDouble, "Unsupported dtype ", t);
}

at::Tensor& write_spectrum(at::Tensor& out, const Complex& y, int64_t normalization, double n, c10::ScalarType ct,
                           const at::Tensor& self) {
  DType comp = to_engine(c10::toRealValueType(ct));
  return write_complex(out, normalized(y.re, normalization, n).cast(comp), normalized(y.im, normalization, n).cast(comp),
                       y.re.shape(), {self});
}

Complex complex_input(const at::Tensor& self) {
  TORCH_CHECK(self.is_complex(), "Expected a complex input tensor to FFT");
  TORCH_CHECK(self.scalar_type() == c10::kComplexFloat || self.scalar_type() == c10::kComplexDouble,
              "Unsupported dtype ", self.scalar_type());
  auto [re, im] = complex_parts(self, DType::Float64, to_shape(self.sizes()));
  return {re, im};
}

// ---------------------------------------------------------------- r2c
at::Tensor& fft_r2c_out(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided,
                        at::Tensor& out) {
  TinyOp op("fft_r2c");
  check_real_fft_input(self);
  std::vector<int> dims = wrapped_dims(self, dim);
  Complex y{read(self).cast(DType::Float64), T()};
  double n = 1;
  for (size_t i = dims.size(); i-- > 0;) {  // the last dim is the one-sided one
    int64_t len = self.size(dims[i]);
    n *= double(len);
    y = dft(y, dims[i], len, i + 1 == dims.size() && onesided ? len / 2 + 1 : len, true);
  }
  return write_spectrum(out, y, normalization, n, c10::toComplexType(self.scalar_type()), self);
}
at::Tensor fft_r2c(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided) {
  at::Tensor out = at::empty({0}, self.options().dtype(c10::toComplexType(self.scalar_type())));
  return fft_r2c_out(self, dim, normalization, onesided, out);
}

// ---------------------------------------------------------------- c2c
at::Tensor& fft_c2c_out(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool forward,
                        at::Tensor& out) {
  TinyOp op("fft_c2c");
  Complex y = complex_input(self);
  double n = 1;
  for (int d : wrapped_dims(self, dim)) {
    int64_t len = self.size(d);
    n *= double(len);
    y = dft(y, d, len, len, forward);
  }
  return write_spectrum(out, y, normalization, n, self.scalar_type(), self);
}
at::Tensor fft_c2c(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool forward) {
  at::Tensor out = at::empty({0}, self.options());
  return fft_c2c_out(self, dim, normalization, forward, out);
}

// ---------------------------------------------------------------- c2r
at::Tensor& fft_c2r_out(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, int64_t last_dim_size,
                        at::Tensor& out) {
  TinyOp op("fft_c2r");
  Complex y = complex_input(self);
  std::vector<int> dims = wrapped_dims(self, dim);
  TORCH_CHECK(!dims.empty(), "fft_c2r: expected at least one dim");
  double n = double(last_dim_size);
  for (size_t i = 0; i + 1 < dims.size(); i++) {
    int64_t len = self.size(dims[i]);
    n *= double(len);
    y = dft(y, dims[i], len, len, false);
  }
  T real = dft_to_real(y, dims.back(), last_dim_size);
  c10::ScalarType rt = c10::toRealValueType(self.scalar_type());
  return assign_out(out, normalized(real, normalization, n).cast(to_engine(rt)), rt, {self});
}
at::Tensor fft_c2r(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, int64_t last_dim_size) {
  at::Tensor out = at::empty({0}, self.options().dtype(c10::toRealValueType(self.scalar_type())));
  return fft_c2r_out(self, dim, normalization, last_dim_size, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fft_r2c", fft_r2c);
  m.impl("_fft_r2c.out", fft_r2c_out);
  m.impl("_fft_c2c", fft_c2c);
  m.impl("_fft_c2c.out", fft_c2c_out);
  m.impl("_fft_c2r", fft_c2r);
  m.impl("_fft_c2r.out", fft_c2r_out);
}

}  // namespace torch_tiny
