// Random ops. Values come from the tiny generator (generator.h): each op
// reserves as many Philox counters as it draws, so torch.manual_seed makes
// runs repeatable and draws never overlap. The uniforms are computed inside
// kernels (Tensor::rand), and the distributions are elementwise transforms
// of them, so a random op fuses with its consumer.
//
// ATen's distribution templates (DistributionTemplates.h) do the argument
// checks with the CPU's messages and call the kernels below.
//
// randperm and multinomial draw their uniforms the same way but finish on
// the host (a sort, a binary search over a cumulative sum): sync points.
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/argsort.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/generator.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;
namespace tmpl = at::native::templates;

T cf(double v, DType dt, const tiny::Shape& s) { return T::full(s, tiny::Scalar::from_double(v), dt); }
T ci(int64_t v, const tiny::Shape& s) { return T::full(s, tiny::Scalar::from_int(v), DType::Int64); }

// float64 results get 48 random bits (two draws), everything else 24 (one draw).
DType compute_type(c10::ScalarType st) { return st == c10::kDouble ? DType::Float64 : DType::Float32; }

// Uniform in [0, 1) of dtype `dt` (Float32 or Float64), one per element of `shape`.
T uniform01(TinyGenerator* g, const tiny::Shape& shape, DType dt) {
  uint64_t n = uint64_t(tiny::numel(shape));
  if (dt != DType::Float64) {
    auto [seed, off] = g->take(n);
    return T::rand(shape, seed, off);
  }
  auto [seed, off] = g->take(2 * n);
  T hi = T::rand(shape, seed, off).cast(DType::Float64);
  T lo = T::rand(shape, seed, off + n).cast(DType::Float64);
  return hi.binary(Op::Add, lo.binary(Op::Mul, cf(1.0 / 16777216.0, DType::Float64, shape)));
}

// Standard normal by Box-Muller from two uniforms.
T standard_normal(TinyGenerator* g, const tiny::Shape& shape, DType dt) {
  T u1 = uniform01(g, shape, dt), u2 = uniform01(g, shape, dt);
  T r = cf(1.0, dt, shape).binary(Op::Sub, u1).unary(Op::Log).binary(Op::Mul, cf(-2.0, dt, shape)).unary(Op::Sqrt);
  return r.binary(Op::Mul, u2.binary(Op::Mul, cf(2.0 * M_PI, dt, shape)).unary(Op::Cos));
}

// `bits` random bits as a non-negative int64 (24 per draw).
T random_bits(TinyGenerator* g, const tiny::Shape& shape, int bits) {
  int draws = (bits + 23) / 24;
  uint64_t n = uint64_t(tiny::numel(shape));
  auto [seed, off] = g->take(uint64_t(draws) * n);
  T acc;
  for (int k = 0; k < draws; k++) {
    T b = T::rand(shape, seed, off + uint64_t(k) * n).binary(Op::Mul, cf(16777216.0, DType::Float32, shape)).cast(DType::Int64);
    if (k > 0) b = b.binary(Op::Shl, ci(24 * k, shape));
    acc = acc.defined() ? acc.binary(Op::Or, b) : b;
  }
  return acc;
}

void deliver(const at::Tensor& self, const T& v) { write(self, v.cast(to_engine(self.scalar_type()))); }

const at::Tensor& out_of(at::TensorIteratorBase& iter) { return iter.tensor(0); }

// ---------------------------------------------------------------- kernels called by the ATen templates

template <typename RNG>
struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("uniform_");
    DType dt = compute_type(self.scalar_type());
    tiny::Shape s = to_shape(self.sizes());
    T u = uniform01(get_generator(gen), s, dt);
    // as the CPU does, 16-bit floats draw only as many bits as they hold, so [0, 1) stays below 1
    int digits = self.scalar_type() == c10::kHalf ? 11 : self.scalar_type() == c10::kBFloat16 ? 8 : 0;
    if (digits) {
      double scale = double(int64_t(1) << digits);
      u = u.binary(Op::Mul, cf(scale, dt, s)).unary(Op::Floor).binary(Op::Mul, cf(1.0 / scale, dt, s));
    }
    deliver(self, u.binary(Op::Mul, cf(to - from, dt, s)).binary(Op::Add, cf(from, dt, s)));
  }
};

template <typename RNG>
struct NormalKernel {
  void operator()(const at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"normal_kernel_tiny\" not implemented for '",
                                c10::toString(self.scalar_type()), "'");
    TinyOp op("normal_");
    DType dt = compute_type(self.scalar_type());
    tiny::Shape s = to_shape(self.sizes());
    T z = standard_normal(get_generator(gen), s, dt);
    deliver(self, z.binary(Op::Mul, cf(std, dt, s)).binary(Op::Add, cf(mean, dt, s)));
  }
};

template <typename RNG>
struct LogNormalKernel {
  void operator()(at::TensorIteratorBase& iter, double mean, double std, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"log_normal_tiny\" not implemented for '",
                                c10::toString(self.scalar_type()), "'");
    TinyOp op("log_normal_");
    DType dt = compute_type(self.scalar_type());
    tiny::Shape s = to_shape(self.sizes());
    T z = standard_normal(get_generator(gen), s, dt);
    deliver(self, z.binary(Op::Mul, cf(std, dt, s)).binary(Op::Add, cf(mean, dt, s)).unary(Op::Exp));
  }
};

template <typename RNG>
struct ExponentialKernel {
  void operator()(at::TensorIteratorBase& iter, double lambda, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TORCH_CHECK(c10::isFloatingType(self.scalar_type()),
                "Exponential distribution is a continuous probability distribution. dtype must be a floating point but you specified ",
                self.scalar_type());
    TinyOp op("exponential_");
    DType dt = compute_type(self.scalar_type());
    tiny::Shape s = to_shape(self.sizes());
    // -log(v) / lambda with v in (0, 1]; as on the CPU, v near 1 gives eps/2 rather than 0
    double eps = dt == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
    T v = cf(1.0, dt, s).binary(Op::Sub, uniform01(get_generator(gen), s, dt));
    T lg = T::where(cf(1.0 - eps / 2, dt, s).binary(Op::CmpLe, v), cf(-eps / 2, dt, s), v.unary(Op::Log));
    deliver(self, lg.binary(Op::Mul, cf(-1.0 / lambda, dt, s)));
  }
};

template <typename RNG>
struct GeometricKernel {
  void operator()(at::TensorIteratorBase& iter, double p, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("geometric_");
    tiny::Shape s = to_shape(self.sizes());
    // ceil(log(v) / log1p(-p)) with v in (0, 1): the draw moved to its bucket's middle
    T v = uniform01(get_generator(gen), s, DType::Float32).cast(DType::Float64).binary(Op::Add, cf(0.5 / 16777216.0, DType::Float64, s));
    deliver(self, v.unary(Op::Log).binary(Op::Mul, cf(1.0 / std::log1p(-p), DType::Float64, s)).unary(Op::Ceil));
  }
};

template <typename RNG>
struct CauchyKernel {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("cauchy_");
    DType dt = compute_type(self.scalar_type());
    tiny::Shape s = to_shape(self.sizes());
    T u = uniform01(get_generator(gen), s, dt).binary(Op::Sub, cf(0.5, dt, s));
    T t = u.binary(Op::Mul, cf(M_PI, dt, s)).unary(Op::Tan);
    deliver(self, t.binary(Op::Mul, cf(sigma, dt, s)).binary(Op::Add, cf(median, dt, s)));
  }
};

// Integers in [base, base + range), range in (0, 2^64]: modulo of 64 random
// bits (fewer draws for small ranges), as the CPU reduces its random words.
T random_range(TinyGenerator* g, const tiny::Shape& s, uint64_t range, int64_t base) {
  if (range == 0 || range > (uint64_t(1) << 63)) {
    // 64 random bits; x mod range by one conditional subtraction (unsigned compare via the sign flip)
    T x = random_bits(g, s, 64);
    T m = x;
    if (range != 0) {
      T flip = ci(INT64_MIN, s);
      T below = x.binary(Op::Xor, flip).binary(Op::CmpLt, ci(int64_t(range ^ (uint64_t(1) << 63)), s));
      m = T::where(below, x, x.binary(Op::Sub, ci(int64_t(range), s)));
    }
    return m.binary(Op::Add, ci(base, s));
  }
  int bits = 24;
  while (bits < 63 && (uint64_t(1) << bits) < range) bits += 24;
  T x = random_bits(g, s, std::min(bits, 72));
  if (bits > 63) x = x.binary(Op::And, ci(INT64_MAX, s));
  T r = range == (uint64_t(1) << 63) ? x : x.binary(Op::Mod, ci(int64_t(range), s));
  return r.binary(Op::Add, ci(base, s));
}

template <typename RNG>
struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("random_");
    deliver(self, random_range(get_generator(gen), to_shape(self.sizes()), range, base));
  }
  // the whole int64 range
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("random_");
    deliver(self, random_range(get_generator(gen), to_shape(self.sizes()), 0, 0));
  }
};

// random_(): [0, 2^mantissa digits] for floats, [0, max] for integers.
template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::Tensor& self = out_of(iter);
    TinyOp op("random_");
    uint64_t to_inc = 0;
    switch (self.scalar_type()) {
      case c10::kBool: to_inc = 1; break;
      case c10::kByte: to_inc = 255; break;
      case c10::kChar: to_inc = 127; break;
      case c10::kShort: to_inc = 32767; break;
      case c10::kInt: to_inc = INT32_MAX; break;
      case c10::kLong: to_inc = INT64_MAX; break;
      case c10::kHalf: to_inc = uint64_t(1) << 11; break;
      case c10::kBFloat16: to_inc = uint64_t(1) << 8; break;
      case c10::kFloat: to_inc = uint64_t(1) << 24; break;
      case c10::kDouble: to_inc = uint64_t(1) << 53; break;
      default: TORCH_CHECK(false, "random_ not implemented for ", self.scalar_type());
    }
    deliver(self, random_range(get_generator(gen), to_shape(self.sizes()), to_inc + 1, 0));
  }
};

template <typename RNG>
struct BernoulliScalarKernel {
  void operator()(const at::Tensor& self, double p, std::optional<at::Generator> gen) {
    TinyOp op("bernoulli_");
    tiny::Shape s = to_shape(self.sizes());
    T u = uniform01(get_generator(gen), s, DType::Float64);
    deliver(self, u.binary(Op::CmpLt, cf(p, DType::Float64, s)));
  }
};

// The CPU checks every probability; here that needs their values: a sync point.
void check_probabilities(const T& p) {
  std::vector<int> axes;
  for (int i = 0; i < p.ndim(); i++) axes.push_back(i);
  T zero = cf(0, p.dtype(), p.shape()), one = cf(1, p.dtype(), p.shape());
  T ok = zero.binary(Op::CmpLe, p).binary(Op::And, p.binary(Op::CmpLe, one));
  if (p.ndim() > 0) ok = ok.reduce(tiny::ReduceOp::All, axes, false);
  bool good = true;
  ok.copy_to_host(&good);
  TORCH_CHECK(good, "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be improved?  If so, please report an enhancement request to PyTorch.)");
}

template <typename RNG>
struct BernoulliTensorKernel {
  void operator()(const at::Tensor& self, const at::Tensor& p_, std::optional<at::Generator> gen) {
    TinyOp op("bernoulli_");
    auto expanded = at::expand_inplace(self, p_, "bernoulli_");
    const at::Tensor& p = *expanded;
    tiny::Shape s = to_shape(self.sizes());
    DType dt = p.scalar_type() == c10::kDouble ? DType::Float64 : DType::Float32;
    T pv = p.device().type() == c10::DeviceType::CPU ? from_cpu(p.to(to_aten(dt))) : read(p).cast(dt);
    pv = pv.reshape(s);
    check_probabilities(pv);
    T u = uniform01(get_generator(gen), s, dt);
    deliver(self, u.binary(Op::CmpLt, pv));
  }
};

// ---------------------------------------------------------------- registered ops

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return tmpl::uniform_impl_<UniformKernel, TinyGenerator>(self, from, to, gen);
}
at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl_<NormalKernel, TinyGenerator>(self, mean, std, gen);
}
at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, TinyGenerator>(mean, std, gen);
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, TinyGenerator>(mean, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, TinyGenerator>(mean, std, gen);
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen, at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, TinyGenerator>(out, mean, std, gen);
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen, at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, TinyGenerator>(out, mean, std, gen);
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                     at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, TinyGenerator>(out, mean, std, gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return tmpl::log_normal_impl_<LogNormalKernel, TinyGenerator>(self, mean, std, gen);
}
at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  return tmpl::exponential_impl_<ExponentialKernel, TinyGenerator>(self, lambda, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return tmpl::geometric_impl_<GeometricKernel, TinyGenerator>(self, p, gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  return tmpl::cauchy_impl_<CauchyKernel, TinyGenerator>(self, median, sigma, gen);
}
at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return tmpl::random_impl<RandomKernel, TinyGenerator>(self, gen);
}
at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  return tmpl::random_from_to_impl<RandomFromToKernel, TinyGenerator>(self, from, to, gen);
}
at::Tensor& random_to_(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return tmpl::random_from_to_impl<RandomFromToKernel, TinyGenerator>(self, 0, to, gen);
}
at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return tmpl::bernoulli_impl_<BernoulliScalarKernel, TinyGenerator>(self, p, gen);
}
at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  return tmpl::bernoulli_impl_<BernoulliTensorKernel, TinyGenerator>(self, p, gen);
}
at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  return tmpl::bernoulli_out_impl<BernoulliTensorKernel, TinyGenerator>(out, self, gen);
}

// ---------------------------------------------------------------- dropout

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TinyOp op("native_dropout");
  tiny::Shape s = to_shape(input.sizes());
  if (input.numel() == 0) return {input, make_result(T::full(s, tiny::Scalar::from_int(0), to_engine(input.scalar_type())), input.scalar_type())};
  if (train.has_value() && !*train) {
    return {make_result(read(input), input.scalar_type()),
            make_result(T::full(s, tiny::Scalar::from_bool(true), DType::Bool), c10::kBool)};
  }
  double p1m = 1. - p;
  double scale = p1m == 0 ? 0. : 1. / p1m;
  T keep = uniform01(get_generator(std::nullopt), s, DType::Float32).binary(Op::CmpLt, cf(p1m, DType::Float32, s));
  // (input * mask) * scale, the CPU's order (NaN and -0.0 behave the same)
  DType dt = to_engine(input.scalar_type());
  T out = read(input).binary(Op::Mul, keep.cast(dt)).binary(Op::Mul, cf(scale, dt, s));
  return {make_result(out, input.scalar_type()), make_result(keep, c10::kBool)};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  TinyOp op("native_dropout_backward");
  c10::ScalarType st = at::result_type(grad, mask);
  tiny::Shape s = broadcast_shape({grad, mask});
  DType dt = to_engine(st);
  T r = operand(grad, st, s).binary(Op::Mul, operand(mask, st, s)).binary(Op::Mul, cf(scale, dt, s));
  return make_result(r, st);
}

// ---------------------------------------------------------------- randperm / multinomial (host)

// Uniforms from the tiny generator, computed and copied to the host.
at::Tensor host_uniforms(TinyGenerator* g, int64_t n) {
  at::Tensor host = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
  if (n == 0) return host;
  T u;
  {
    TinyOp op("uniforms");
    u = uniform01(g, {n}, DType::Float64);
  }
  u.copy_to_host(host.data_ptr());
  return host;
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::check_supported_max_int_with_precision(n, out);
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  // a random permutation: the order that sorts n random keys
  at::Tensor keys = host_uniforms(get_generator(gen), n);
  at::Tensor perm = at::argsort(keys, /*stable=*/true, 0, false).to(out.scalar_type());
  TinyOp op("randperm");
  write(out, from_cpu(perm));
  return out;
}

at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool with_replacement,
                            std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(result.scalar_type() == c10::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  int64_t n_categories = self.size(-1);
  TORCH_CHECK(with_replacement || (n_sample <= n_categories),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t(1) << 24), "number of categories cannot exceed 2^24");
  if (self.dim() == 1) result.resize_({n_sample});
  else result.resize_({self.size(0), n_sample});
  if (self.numel() == 0) return result;
  at::Tensor probs = self.cpu().to(at::kDouble).reshape({-1, n_categories}).contiguous();
  int64_t rows = probs.size(0);
  const double* pp = probs.data_ptr<double>();
  at::Tensor out = at::empty({rows, n_sample}, at::TensorOptions().dtype(at::kLong));
  int64_t* op_ = out.data_ptr<int64_t>();
  TinyGenerator* g = get_generator(gen);
  if (!with_replacement || n_sample == 1) {
    // the CPU's method: the top n_sample of p / q with q ~ Exp(1)
    for (int64_t i = 0; i < probs.numel(); i++)
      TORCH_CHECK(std::isfinite(pp[i]) && pp[i] >= 0, "probability tensor contains either `inf`, `nan` or element < 0");
    for (int64_t r = 0; r < rows; r++) {
      double sum = 0;
      for (int64_t c = 0; c < n_categories; c++) sum += pp[r * n_categories + c];
      TORCH_CHECK(sum != 0, "invalid multinomial distribution (sum of probabilities <= 0)");
    }
    at::Tensor u = host_uniforms(g, rows * n_categories);
    const double* up = u.data_ptr<double>();
    std::vector<std::pair<double, int64_t>> keyed(static_cast<size_t>(n_categories));
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t c = 0; c < n_categories; c++) {
        double q = -std::log1p(-up[r * n_categories + c]);
        keyed[size_t(c)] = {pp[r * n_categories + c] / q, c};
      }
      std::stable_sort(keyed.begin(), keyed.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (int64_t k = 0; k < n_sample; k++) op_[r * n_sample + k] = keyed[size_t(k)].second;
    }
  } else {
    // the CPU's method: binary search of a uniform in the normalized cumulative sum
    at::Tensor u = host_uniforms(g, rows * n_sample);
    const double* up = u.data_ptr<double>();
    std::vector<double> cdf(static_cast<size_t>(n_categories));
    for (int64_t r = 0; r < rows; r++) {
      double sum = 0;
      for (int64_t c = 0; c < n_categories; c++) {
        double v = pp[r * n_categories + c];
        TORCH_CHECK(v >= 0, "invalid multinomial distribution (encountering probability entry < 0)");
        TORCH_CHECK(std::isfinite(v), "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
        sum += v;
        cdf[size_t(c)] = sum;
      }
      TORCH_CHECK(sum > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
      for (auto& c : cdf) c /= sum;
      for (int64_t k = 0; k < n_sample; k++) {
        double x = up[r * n_sample + k];
        int64_t lo = 0, hi = n_categories;
        while (hi - lo > 0) {
          int64_t mid = lo + (hi - lo) / 2;
          if (cdf[size_t(mid)] < x) lo = mid + 1;
          else hi = mid;
        }
        op_[r * n_sample + k] = std::min(lo, n_categories - 1);
      }
    }
  }
  TinyOp op("multinomial");
  write(result, from_cpu(out).reshape(to_shape(result.sizes())));
  return result;
}
at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool with_replacement, std::optional<at::Generator> gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  multinomial_out(self, n_sample, with_replacement, gen, result);
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("normal.Tensor_float", normal_tensor_float);
  m.impl("normal.float_Tensor", normal_float_tensor);
  m.impl("normal.Tensor_Tensor", normal_tensor_tensor);
  m.impl("normal.Tensor_float_out", normal_tensor_float_out);
  m.impl("normal.float_Tensor_out", normal_float_tensor_out);
  m.impl("normal.Tensor_Tensor_out", normal_tensor_tensor_out);
  m.impl("log_normal_", log_normal_);
  m.impl("exponential_", exponential_);
  m.impl("geometric_", geometric_);
  m.impl("cauchy_", cauchy_);
  m.impl("random_", random_);
  m.impl("random_.from", random_from_);
  m.impl("random_.to", random_to_);
  m.impl("bernoulli_.float", bernoulli_float_);
  m.impl("bernoulli_.Tensor", bernoulli_tensor_);
  m.impl("bernoulli.out", bernoulli_out);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
  m.impl("randperm.generator_out", randperm_out);
  m.impl("multinomial", multinomial);
  m.impl("multinomial.out", multinomial_out);
}

}  // namespace torch_tiny
