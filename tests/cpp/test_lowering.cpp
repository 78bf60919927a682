// Lowering: the plans kernels get on described devices (lowering.h), decided without
// generating code, so one machine checks the choices for every vector width and GPU.
#include <array>
#include <cmath>
#include <tuple>

#include "engine/codegen/llvm_codegen.h"
#include "engine/codegen/lowering.h"
#include "engine/runtime/llvm_jit.h"
#include "engine/schedule/schedule_cache.h"
#include "engine/schedule/scheduler.h"
#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

const CpuTarget kAvx512{16, 32, 2}, kAvx2{8, 16, 2}, kSse{4, 16, 2};

// Stored inputs (a random tensor would be a computation of its own).
Tensor values(const Shape& shape) {
  std::vector<float> v(size_t(numel(shape)));
  for (size_t i = 0; i < v.size(); i++) v[i] = float(int(i * 7 % 13) - 6) * 0.25f;
  return from(v, shape);
}

Kernel only_kernel(const Tensor& t) {
  Schedule s = create_schedule({t.node()});
  EXPECT_EQ(s.kernels.size(), 1u);
  return s.kernels.back();
}

// A 3x3 convolution summed directly: x (N, C, S, S) read at an offset of -pad (zero outside),
// w (OC, C, 3, 3) (its taps reversed where flipped), outputs (N, OC, H, H).
void expect_conv3x3(const std::vector<double>& got, const std::vector<double>& x, const std::vector<double>& w,
                    int64_t N, int64_t C, int64_t OC, int64_t S, int64_t H, int64_t pad, bool flipped = false) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++)
      for (int64_t r = 0; r < H; r++)
        for (int64_t c = 0; c < H; c++) {
          double want = 0;
          for (int64_t ci = 0; ci < C; ci++)
            for (int64_t ky = 0; ky < 3; ky++)
              for (int64_t kx = 0; kx < 3; kx++) {
                int64_t iy = r + ky - pad, ix = c + kx - pad;
                if (iy < 0 || iy >= S || ix < 0 || ix >= S) continue;
                int64_t wy = flipped ? 2 - ky : ky, wx = flipped ? 2 - kx : kx;
                want += x[size_t(((n * C + ci) * S + iy) * S + ix)] * w[size_t((o * C + ci) * 9 + wy * 3 + wx)];
              }
          ASSERT_NEAR(got[size_t(((n * OC + o) * H + r) * H + c)], want, 1e-3) << n << " " << o << " " << r << " " << c;
        }
}

// got (M, N) = a (M, K) @ b, b stored (K, N) or, `b_rows_are_n`, (N, K).
void expect_matmul(const std::vector<double>& got, const std::vector<double>& a, const std::vector<double>& b,
                   int64_t M, int64_t K, int64_t N, bool b_rows_are_n, double tol = 1e-4) {
  ASSERT_EQ(got.size(), size_t(M * N));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double want = 0;
      for (int64_t q = 0; q < K; q++) want += a[size_t(m * K + q)] * b[size_t(b_rows_are_n ? n * K + q : q * N + n)];
      ASSERT_NEAR(got[size_t(m * N + n)], want, tol) << m << ", " << n;
    }
}

}  // namespace

// A matmul takes channel tiles of two vectors of its columns by as many rows as the vector
// registers hold accumulators for; where b has 2 panels per thread or more the threads split
// its columns, whole tiles each, else the rows.
TEST(Lowering, MatmulChannelTilesFollowTheVectorUnit) {
  Kernel k = only_kernel(values({256, 128}).matmul(values({128, 96})));
  CpuPlan wide = lower_cpu(k, kAvx512), narrow = lower_cpu(k, kAvx2), sse = lower_cpu(k, kSse);
  ASSERT_TRUE(wide.channel && narrow.channel && sse.channel);
  EXPECT_EQ(wide.channel->cols, 32);
  EXPECT_EQ(wide.channel->rows, 14);
  EXPECT_EQ(narrow.channel->cols, 16);
  EXPECT_EQ(narrow.channel->rows, 4);
  EXPECT_EQ(sse.channel->cols, 8);
  EXPECT_EQ(wide.parallel_dim, 0);  // 96 columns: 1.5 panels of 32 per thread
  EXPECT_EQ(narrow.parallel_dim, 1);
  EXPECT_EQ(narrow.parallel_grain, 16);
  EXPECT_FALSE(wide.split || wide.vector_tile || wide.blocks);
  EXPECT_GE(wide.num_vars, 2);  // the output dims' variables, then the plan's own
}

// A matmul whose columns are whole tiles of four vectors, over many rows, takes tiles of four
// vectors by 6 rows with 32 registers (fewer loads per FMA than 2 x 14); its rows read `a` in
// place. Over (batch, tokens) rows, b moving with neither, the threads split the columns as
// for a 2-D matmul rather than each packing all of b. Values match direct sums, partial row
// tiles included (100 rows: 16 tiles of 6 and 4).
TEST(Lowering, MatmulsOfWholeWideTilesTakeFourVectorsBySixRows) {
  Tensor a = values({100, 64}), b = values({64, 128});
  Kernel k = only_kernel(a.matmul(b));
  CpuPlan wide = lower_cpu(k, kAvx512), narrow = lower_cpu(k, kAvx2);
  ASSERT_TRUE(wide.channel && narrow.channel);
  EXPECT_EQ(wide.channel->cols, 64);
  EXPECT_EQ(wide.channel->rows, 6);
  EXPECT_TRUE(wide.channel->a_in_place);
  EXPECT_EQ(narrow.channel->cols, 16);
  EXPECT_EQ(narrow.channel->rows, 4);
  EXPECT_FALSE(narrow.channel->a_in_place);
  // 96 columns (not whole wide tiles), 192 split over 2 threads (3 wide tiles) and 16 rows (a
  // small batch through a linear layer, where the packing streams the weight) keep two
  // vectors by 14 rows
  for (auto [m, n] : {std::pair<int64_t, int64_t>{100, 96}, {100, 192}, {16, 128}}) {
    CpuPlan p = lower_cpu(only_kernel(values({m, 64}).matmul(values({64, n}))), kAvx512);
    ASSERT_TRUE(p.channel) << m << " x " << n;
    EXPECT_EQ(p.channel->cols, 32) << m << " x " << n;
  }
  const int64_t B = 4, T = 64, K = 64, N = 256;
  Tensor x = values({B, T, K}), w = values({N, K});
  Tensor::realize_all({x, w});
  Tensor y = x.reshape({B, T, 1, K}).expand({B, T, N, K})
                 .binary(Op::Mul, w.reshape({1, 1, N, K}).expand({B, T, N, K}))
                 .reduce(ReduceOp::Sum, {3}, false);
  CpuPlan tokens = lower_cpu(only_kernel(y), kAvx512);
  ASSERT_TRUE(tokens.channel);
  EXPECT_EQ(tokens.channel->cols, 64);
  EXPECT_EQ(tokens.parallel_dim, 2);
  Tensor c = a.matmul(b);
  expect_matmul(to_doubles(c), to_doubles(a), to_doubles(b), 100, 64, 128, false, 1e-3);
  expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), B * T, K, N, true, 1e-3);
}

// A column sum (no operand to pack) takes a register tile of the last dim, as wide as two
// vectors; a full sum splits into 32 fixed chunks whatever the thread count.
TEST(Lowering, VectorTilesAndSplitReductions) {
  Tensor x = values({300, 200});
  Kernel cols = only_kernel(x.reduce(ReduceOp::Sum, {0}, false));
  for (const CpuTarget& t : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(cols, t);
    ASSERT_TRUE(p.vector_tile) << t.lanes;
    EXPECT_EQ(p.vector_tile->d, 1);
    EXPECT_EQ(p.vector_tile->cols, 2 * t.lanes);
    EXPECT_FALSE(p.channel);
  }
  Kernel all = only_kernel(values({1 << 17}).reduce(ReduceOp::Sum, {0}, false));
  for (int threads : {1, 8}) {
    CpuPlan p = lower_cpu(all, {16, 32, threads});
    ASSERT_TRUE(p.split);
    EXPECT_EQ(p.split->chunks, 32);
  }
}

// The same kernels on GPUs: a float16 matmul runs on tensor cores from compute capability
// 8.0 (2 x 2 warps of 32 x 32, or 2 x 4 of 64 x 32 where 128 x 128 blocks fill the GPU
// twice), on shared tiles of scalars before; a full sum is one block's, split across blocks
// to fill the multiprocessors.
TEST(Lowering, CudaPlansFollowTheGpu) {
  Tensor a = values({512, 256}).cast(DType::Float16), b = values({256, 512}).cast(DType::Float16);
  Tensor::realize_all({a, b});
  Kernel mm = only_kernel(a.cast(DType::Float32).matmul(b.cast(DType::Float32)));
  CudaRenderOptions turing, ampere, h100;
  turing.arch = 75;
  ampere.arch = 80;
  h100.arch = 90;
  ampere.multiprocessors = turing.multiprocessors = 108;
  h100.multiprocessors = 8;  // 16 blocks of 128 x 128: twice the multiprocessors
  CudaPlan t = lower_cuda(mm, turing), am = lower_cuda(mm, ampere), hp = lower_cuda(mm, h100);
  EXPECT_TRUE(t.shared);
  EXPECT_EQ(t.mma, CudaMma::None);
  EXPECT_EQ(am.mma, CudaMma::F16);
  EXPECT_EQ(am.shared_threads(), 128);
  EXPECT_EQ(am.launch_outputs, 8 * 8);
  EXPECT_EQ(hp.shared_threads(), 256);
  EXPECT_EQ(hp.block_rows() * hp.block_cols(), 128 * 128);
  EXPECT_EQ(hp.launch_outputs, 4 * 4);
  Kernel sum = only_kernel(values({1 << 20}).reduce(ReduceOp::Sum, {0}, false));
  CudaPlan one = lower_cuda(sum, h100);
  EXPECT_TRUE(one.block_reduce);
  EXPECT_EQ(one.split, 8 * 8);  // 8 blocks per multiprocessor
  EXPECT_EQ(one.launch_outputs, 1);
  EXPECT_EQ(one.min_blocks_per_sm, 0);
  // float32 on 8 x 8 scalar tiles: at most 128 registers, two blocks per multiprocessor
  Kernel mm32 = only_kernel(values({512, 256}).matmul(values({256, 512})));
  CudaPlan f32 = lower_cuda(mm32, h100);
  EXPECT_EQ(f32.tile_rows, 8);
  EXPECT_EQ(f32.block_size, 256);
  EXPECT_EQ(f32.min_blocks_per_sm, 2);
  EXPECT_EQ(hp.min_blocks_per_sm, 0);  // tensor cores: not capped
}

// An elementwise kernel whose narrow trailing dims are read and written contiguously runs them
// as one loop (a 3x3 convolution weight's SGD update: 2x faster on AVX-512); a bias broadcast
// along the channels keeps the channel loop, a transposed or padded operand the loops it has.
// The results equal the per-dim loops' exactly.
TEST(Lowering, ContiguousNarrowTailsRunAsOneLoop) {
  Tensor w = values({6, 5, 3, 3}), g = values({6, 5, 3, 3}), bias = values({1, 5, 1, 1});
  auto check = [](const Tensor& t, const CpuTarget& target, int from, int64_t count) {
    Kernel k = only_kernel(t);
    CpuPlan p = lower_cpu(k, target);
    if (from < 0) {
      EXPECT_FALSE(p.flat_tail) << "from " << p.flat_tail->from;
      return;
    }
    ASSERT_TRUE(p.flat_tail);
    EXPECT_EQ(p.flat_tail->from, from);
    EXPECT_EQ(p.flat_tail->last, 3);
    EXPECT_EQ(p.flat_tail->count, count);
  };
  Tensor update = w.binary(Op::Sub, g.binary(Op::Mul, Tensor::full({6, 5, 3, 3}, Scalar::from_double(0.5), DType::Float32)));
  check(update, kAvx512, 1, 45);  // dims 1..3 after the threads' dim 0
  check(update, kAvx2, 1, 45);
  Tensor biased = w.binary(Op::Add, bias.expand({6, 5, 3, 3}));
  check(biased, kAvx512, 2, 9);  // the bias moves along dim 1
  check(w.binary(Op::Add, g.permute({0, 1, 3, 2})), kAvx512, -1, 0);  // a transposed 3x3
  check(values({6, 5, 3, 1}).pad({{0, 0}, {0, 0}, {0, 0}, {1, 1}}), kAvx512, -1, 0);  // a mask along dim 3
  check(values({6, 5, 3, 32}).binary(Op::Add, values({6, 5, 3, 32})), kAvx512, -1, 0);  // wide enough
  // the numbers, on this machine's CPU
  auto close = [](const Tensor& t, const std::vector<double>& want) {
    std::vector<double> got = to_doubles(t);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], want[i]) << i;
  };
  std::vector<double> wv = to_doubles(w), gv = to_doubles(g), bv = to_doubles(bias), up, bi;
  for (size_t i = 0; i < wv.size(); i++) {
    up.push_back(double(float(wv[i]) - float(gv[i]) * 0.5f));
    bi.push_back(double(float(wv[i]) + float(bv[i / 9 % 5])));
  }
  close(update, up);
  close(biased, bi);
}

// An elementwise kernel that reads NCHW along the width and writes channels-last (a batch
// norm's backward writing grad_output for a weight gradient) runs the width innermost:
// along the channels, every load strode a whole feature map. A per-channel table (the
// scale) does not count as a stream; an order that already suits keeps its loops.
TEST(Lowering, ElementwiseLoopsRunInnermostWhereTheStreamsAre) {
  Tensor x = values({4, 24, 6, 10}), g = values({4, 24, 6, 10}), scale = values({1, 24, 1, 1});
  Tensor grad = g.binary(Op::Mul, scale.expand({4, 24, 6, 10})).binary(Op::Add, x);
  Tensor channels_last = grad.permute({0, 2, 3, 1}).contiguous();  // (4, 6, 10, 24)
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(only_kernel(channels_last), target);
    ASSERT_TRUE(p.inner_loop);
    EXPECT_EQ(p.inner_loop->dim, 2);  // the width: x and g run along it, the store does not
    EXPECT_FALSE(lower_cpu(only_kernel(grad.contiguous()), target).inner_loop);
  }
  std::vector<double> xv = to_doubles(x), gv = to_doubles(g), sv = to_doubles(scale), want;
  for (int n = 0; n < 4; n++)
    for (int h = 0; h < 6; h++)
      for (int w = 0; w < 10; w++)
        for (int c = 0; c < 24; c++) {
          size_t i = size_t(((n * 24 + c) * 6 + h) * 10 + w);
          want.push_back(double(float(gv[i]) * float(sv[size_t(c)]) + float(xv[i])));
        }
  std::vector<double> got = to_doubles(channels_last);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], want[i]) << i;
}

// Stored channels-last where the run before the channels and the channels both divide into
// whole vectors (resnet18's batch-norm backward, written NHWC for a weight gradient), an
// elementwise kernel runs in lanes x lanes blocks, computed along the run and transposed in
// registers, for float32 and for int32; both sides of the copy then move whole vectors.
TEST(Lowering, ChannelsLastCopiesRunInTransposedBlocks) {
  Tensor x = values({4, 32, 6, 8}), g = values({4, 32, 6, 8}), scale = values({1, 32, 1, 1});
  Tensor grad = g.binary(Op::Mul, scale.expand({4, 32, 6, 8})).binary(Op::Add, x);
  Tensor channels_last = grad.permute({0, 2, 3, 1}).contiguous();  // (4, 6, 8, 32)
  Tensor counts = grad.cast(DType::Int32).permute({0, 2, 3, 1}).contiguous();
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    for (const Tensor& t : {channels_last, counts}) {
      CpuPlan p = lower_cpu(only_kernel(t), target);
      ASSERT_TRUE(p.transpose) << target.lanes;
      EXPECT_EQ(p.transpose->run.from, 1);  // the height and the width, 48 positions
      EXPECT_EQ(p.transpose->run.last, 2);
      EXPECT_EQ(p.transpose->run.count, 48);
      EXPECT_EQ(p.transpose->dim, 3);
      EXPECT_FALSE(p.inner_loop || p.flat_tail);
    }
  }
  // 40 positions are not whole vectors of 16: the width runs innermost instead
  Tensor odd = values({2, 32, 5, 8}).permute({0, 2, 3, 1}).contiguous();
  EXPECT_FALSE(lower_cpu(only_kernel(odd), kAvx512).transpose);
  // An NHWC value plus an NCHW one stored NCHW (ConvNeXt's residual stream, its MLP's outputs
  // channels last): the run is the channels alone, the height looped around the blocks, the
  // width stored (40: two blocks of 16 and 8 one by one)
  Tensor nhwc = values({480, 32}), x_nchw = values({2, 32, 6, 40});
  Tensor nchw = nhwc.reshape({2, 6, 40, 32}).permute({0, 3, 1, 2}).binary(Op::Add, x_nchw).contiguous();
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(only_kernel(nchw), target);
    ASSERT_TRUE(p.transpose) << describe(p);
    EXPECT_EQ(p.transpose->run.from, 1);
    EXPECT_EQ(p.transpose->run.last, 1);
    EXPECT_EQ(p.transpose->mid, std::vector<int>{2});
    EXPECT_EQ(p.transpose->dim, 3);
  }
  {
    std::vector<double> v = to_doubles(nhwc), xv = to_doubles(x_nchw), got = to_doubles(nchw);
    for (int n = 0; n < 2; n++)
      for (int c = 0; c < 32; c++)
        for (int h = 0; h < 6; h++)
          for (int w = 0; w < 40; w++) {
            const size_t at = size_t(((n * 32 + c) * 6 + h) * 40 + w);
            ASSERT_EQ(got[at], double(float(v[size_t(((n * 6 + h) * 40 + w) * 32 + c)]) + float(xv[at])));
          }
  }
  // 40 channels (MobileNet's, EfficientNet's) are 2 blocks of 16 and 8 stored one by one
  Tensor forty = values({2, 40, 6, 8});
  Tensor forty_last = forty.permute({0, 2, 3, 1}).contiguous();
  for (const CpuTarget& target : {kAvx512, kAvx2}) EXPECT_TRUE(lower_cpu(only_kernel(forty_last), target).transpose);
  {
    std::vector<double> fv = to_doubles(forty), got = to_doubles(forty_last);
    for (int n = 0; n < 2; n++)
      for (int h = 0; h < 6; h++)
        for (int w = 0; w < 8; w++)
          for (int c = 0; c < 40; c++)
            ASSERT_EQ(got[size_t(((n * 6 + h) * 8 + w) * 40 + c)], fv[size_t(((n * 40 + c) * 6 + h) * 8 + w)]);
  }
  std::vector<double> xv = to_doubles(x), gv = to_doubles(g), sv = to_doubles(scale), want, want_int;
  for (int n = 0; n < 4; n++)
    for (int h = 0; h < 6; h++)
      for (int w = 0; w < 8; w++)
        for (int c = 0; c < 32; c++) {
          size_t i = size_t(((n * 32 + c) * 6 + h) * 8 + w);
          float v = float(gv[i]) * float(sv[size_t(c)]) + float(xv[i]);
          want.push_back(double(v));
          want_int.push_back(double(int32_t(v)));
        }
  for (auto [t, expected] : {std::make_pair(channels_last, want), std::make_pair(counts, want_int)}) {
    std::vector<double> got = to_doubles(t);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], expected[i]) << i;
  }
}

// A batch norm's backward over (N, C, H * W): its per-channel terms are tables of the channels,
// read from cache in any order, not loads along a run of channels; with no other load moving
// along the channels, it runs along its rows (it took transposed blocks, 10x slower).
TEST(Lowering, PerChannelTablesDoNotMakeATransposition) {
  const int64_t N = 4, C = 32, P = 64;
  Tensor x = values({N, C, P}), scale = values({1, C, 1}), shift = values({1, C, 1});
  Tensor y = x.binary(Op::Mul, scale.expand({N, C, P})).binary(Op::Add, shift.expand({N, C, P}));
  for (const CpuTarget& target : {kAvx512, kAvx2}) EXPECT_FALSE(lower_cpu(only_kernel(y), target).transpose) << target.lanes;
  std::vector<double> xv = to_doubles(x), sv = to_doubles(scale), tv = to_doubles(shift), got = to_doubles(y);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < P; q++) {
        const size_t at = size_t((n * C + c) * P + q);
        ASSERT_NEAR(got[at], xv[at] * sv[size_t(c)] + tv[size_t(c)], 1e-6) << n << " " << c << " " << q;
      }
}

// A matrix's transpose (x.t().contiguous()) has no dim after the parallel one to run along:
// the run is the parallel dim itself, each thread's slice of it in whole blocks (its slices
// start at multiples of the lanes). Element by element, the stores were 8 KB apart at 2048
// columns: 18 -> 3.5 ms at 2048^2 (PyTorch's CPU: 13 ms).
TEST(Lowering, MatrixTransposesRunInTransposedBlocks) {
  const int64_t R = 96, C = 48;
  Tensor x = values({R, C});
  Tensor t = x.permute({1, 0}).contiguous();  // (48, 96)
  for (const CpuTarget& target : {kAvx512, kAvx2, kSse}) {
    CpuPlan p = lower_cpu(only_kernel(t), target);
    ASSERT_TRUE(p.transpose) << target.lanes;
    EXPECT_EQ(p.parallel_dim, 0);
    EXPECT_EQ(p.transpose->run.from, 0);
    EXPECT_EQ(p.transpose->run.last, 0);
    EXPECT_EQ(p.transpose->dim, 1);
    EXPECT_EQ(p.parallel_grain, target.lanes);
  }
  std::vector<double> xv = to_doubles(x), got = to_doubles(t);
  ASSERT_EQ(got.size(), size_t(R * C));
  for (int64_t c = 0; c < C; c++)
    for (int64_t r = 0; r < R; r++) EXPECT_EQ(got[size_t(c * R + r)], xv[size_t(r * C + c)]) << c << ", " << r;
}

// Per-channel terms (a batch norm's 1/sqrt(var + eps)) are computed above the loops they do
// not depend on, also where a padded copy's loops are split at the mask boundaries (the
// middle segment, unmasked, no longer needs them guarded) and in a flat tail: the values
// are those of the plain expression.
TEST(Lowering, PerChannelTermsLeaveTheSpatialLoops) {
  Tensor x = values({3, 5, 4, 6}), var = values({1, 5, 1, 1});
  Tensor inv = var.binary(Op::Mul, var).binary(Op::Add, Tensor::full({1, 5, 1, 1}, Scalar::from_double(0.5), DType::Float32))
                   .unary(Op::Sqrt)
                   .unary(Op::Recip);
  Tensor normed = x.binary(Op::Mul, inv.expand({3, 5, 4, 6}));
  Tensor padded = normed.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}});  // (3, 5, 6, 8): split loops
  Tensor flat = normed.contiguous();                               // 4 x 6: a flat tail
  EXPECT_TRUE(lower_cpu(only_kernel(flat), kAvx512).flat_tail);
  std::vector<double> xv = to_doubles(x), vv = to_doubles(var), got_p = to_doubles(padded), got_f = to_doubles(flat);
  ASSERT_EQ(got_p.size(), size_t(3 * 5 * 6 * 8));
  for (int n = 0; n < 3; n++)
    for (int c = 0; c < 5; c++) {
      float v = float(vv[size_t(c)]);
      float scale = 1.0f / std::sqrt(v * v + 0.5f);
      for (int h = 0; h < 6; h++)
        for (int w = 0; w < 8; w++) {
          bool inside = h >= 1 && h <= 4 && w >= 1 && w <= 6;
          size_t src = size_t(((n * 5 + c) * 4 + (h - 1)) * 6 + (w - 1));
          double want = inside ? double(float(xv[src]) * scale) : 0.0;
          EXPECT_EQ(got_p[size_t(((n * 5 + c) * 6 + h) * 8 + w)], want) << n << c << h << w;
          if (inside) EXPECT_EQ(got_f[src], want);
        }
    }
}

// A strided convolution's dilated, padded gradient: zeros but where (h - 1) % 2 == 0 and
// (w - 1) % 2 == 0. Each of those loops runs once per residue mod 2, where the masks and
// the source index (h - 1) / 2 fold: the code has no division or remainder left, and the
// numbers are exact at odd sizes.
TEST(Lowering, LoopsRunOncePerResidueOfTheirMasks) {
  Tensor x = values({2, 3, 5, 5});
  Tensor dilated = x.binary(Op::Mul, Tensor::full({2, 3, 5, 5}, Scalar::from_double(2), DType::Float32))
                       .reshape({2, 3, 5, 1, 5, 1})
                       .pad({{0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 0}, {0, 1}})
                       .reshape({2, 3, 10, 10})
                       .shrink({{0, 2}, {0, 3}, {0, 9}, {0, 9}})
                       .pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}})
                       .contiguous();  // (2, 3, 11, 11)
  std::string ir = llvm_ir(only_kernel(dilated));
  for (const char* op : {" urem ", " srem ", " udiv ", " sdiv "}) EXPECT_EQ(ir.find(op), std::string::npos) << op;
  std::vector<double> xv = to_doubles(x), want;
  for (int n = 0; n < 2; n++)
    for (int c = 0; c < 3; c++)
      for (int h = 0; h < 11; h++)
        for (int w = 0; w < 11; w++) {
          bool on = h >= 1 && h <= 9 && w >= 1 && w <= 9 && (h - 1) % 2 == 0 && (w - 1) % 2 == 0;
          want.push_back(on ? double(2 * float(xv[size_t(((n * 3 + c) * 5 + (h - 1) / 2) * 5 + (w - 1) / 2)])) : 0.0);
        }
  std::vector<double> got = to_doubles(dilated);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], want[i]) << i;
}

// An elementwise kernel's innermost loop is marked independent (each iteration stores its own
// elements and loads nothing stored), so the vectorizer needs no run-time overlap check per
// pair of buffers: past 8 pairs it left the loop scalar (an LSTM cell of 10 inputs and 5
// outputs: 11 us for 512 elements, 1.4 us vectorized). Not where it reads what it writes.
TEST(Lowering, ElementwiseLoopsOfManyBuffersAreMarkedIndependent) {
  std::vector<Tensor> inputs;
  for (int i = 0; i < 10; i++) {
    std::vector<float> v(4 * 128);
    for (size_t e = 0; e < v.size(); e++) v[e] = float(int((e + size_t(i)) * 7 % 13) - 6) * 0.25f;
    inputs.push_back(from(v, {4, 128}));
  }
  Tensor sum = inputs[0];
  for (int i = 1; i < 10; i++) sum = sum.binary(i % 2 ? Op::Add : Op::Mul, inputs[size_t(i)]);
  Kernel k = only_kernel(sum);
  EXPECT_FALSE(k.reads_what_it_writes());
  EXPECT_NE(llvm_ir(k).find("llvm.loop.parallel_accesses"), std::string::npos);
  std::vector<std::vector<double>> in;
  for (auto& t : inputs) in.push_back(to_doubles(t));
  std::vector<double> got = to_doubles(sum);
  for (size_t e = 0; e < got.size(); e++) {
    float want = float(in[0][e]);
    for (size_t i = 1; i < 10; i++) want = i % 2 ? want + float(in[i][e]) : want * float(in[i][e]);
    EXPECT_FLOAT_EQ(float(got[e]), want) << e;
  }
  Kernel in_place = only_kernel(inputs[0].binary(Op::Add, inputs[1]));  // stored over its first input
  in_place.outputs[0].buffer = in_place.loads.begin()->second;
  EXPECT_TRUE(in_place.reads_what_it_writes());
  EXPECT_EQ(llvm_ir(in_place).find("llvm.loop.parallel_accesses"), std::string::npos);
  EXPECT_NE(in_place.key().find("rw;"), std::string::npos);
}

// A reduce over a concatenated axis (an RNN's weight gradient over its time steps' stored runs)
// splits its loop where the parts change: in each segment the selects among the parts fold
// and a step loads its one part (a bias gradient over 8 runs: 335 us, then 19). So does the
// packing of a computed matmul operand along its reduce (the LSTM's W_hh gradient: 1.39 ms,
// then 0.87).
TEST(Lowering, ReduceLoopsSplitWhereConcatenatedPartsChange) {
  std::vector<Tensor> rows, cols;
  std::vector<std::vector<float>> rv;
  for (int p = 0; p < 4; p++) {
    std::vector<float> v(16 * 32);
    for (size_t e = 0; e < v.size(); e++) v[e] = float(int((e * 5 + size_t(p) * 3) % 17) - 8) * 0.125f;
    rv.push_back(v);
    rows.push_back(from(v, {16, 32}));
    cols.push_back(from(v, {16, 32}).permute({1, 0}));
  }
  Tensor sum = Tensor::concat(rows, 0).reduce(ReduceOp::Sum, {0}, true);  // (1, 32) over 64 rows
  Tensor b = values({64, 48});
  Tensor prod = Tensor::concat(cols, 1).binary(Op::Mul, Tensor::full({32, 64}, Scalar::from_double(2), DType::Float32))
                    .matmul(b);  // (32, 64) @ (64, 48), a computed over 4 parts along the reduce
  for (const Tensor* t : {&sum, &prod}) {  // a reduce loop starting at each part's first step
    std::string ir = llvm_ir(only_kernel(*t));
    for (const char* start : {"phi i64 [ 16, %", "phi i64 [ 32, %", "phi i64 [ 48, %"})
      EXPECT_NE(ir.find(start), std::string::npos) << (t == &sum ? "sum: " : "product: ") << start;
  }
  std::vector<double> got = to_doubles(sum), bv = to_doubles(b), gp = to_doubles(prod);
  for (int c = 0; c < 32; c++) {
    double want = 0;
    for (int p = 0; p < 4; p++)
      for (int r = 0; r < 16; r++) want += rv[size_t(p)][size_t(r * 32 + c)];
    EXPECT_NEAR(got[size_t(c)], want, 1e-4) << c;
  }
  for (int i = 0; i < 32; i++)
    for (int j = 0; j < 48; j++) {
      double want = 0;
      for (int k = 0; k < 64; k++) want += 2.0 * rv[size_t(k / 16)][size_t((k % 16) * 32 + i)] * bv[size_t(k * 48 + j)];
      EXPECT_NEAR(gp[size_t(i * 48 + j)], want, 1e-3) << i << "," << j;
    }
}

// A computed channel operand (a weight gradient's grad_output behind a batch norm's backward)
// is packed into panels by a loop over the channels: its expression is in the code once, where
// unrolled per channel (32 copies per step) a ShuffleNet 1x1 convolution's weight gradient took
// 0.7 s to compile.
TEST(Lowering, ComputedPanelsArePackedInALoop) {
  Tensor a = values({64, 128}), b = values({128, 96});
  Tensor bc = b.binary(Op::Mul, b).binary(Op::Add, Tensor::full({128, 96}, Scalar::from_double(1), DType::Float32)).unary(Op::Sqrt);
  Tensor y = a.matmul(bc);
  Kernel k = only_kernel(y);
  CpuPlan plan = lower_cpu(k, kAvx512);
  ASSERT_TRUE(plan.channel.has_value());
  ASSERT_TRUE(plan.channel->computed);
  std::string ir = llvm_ir(k);
  size_t sqrts = 0;
  for (size_t at = ir.find("call float @llvm.sqrt.f32"); at != std::string::npos; at = ir.find("call float @llvm.sqrt.f32", at + 1))
    sqrts++;
  EXPECT_GE(sqrts, 1u);
  EXPECT_LE(sqrts, 4u);
  std::vector<double> av = to_doubles(a), bv = to_doubles(b), got = to_doubles(y);
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 96; j++) {
      double want = 0;
      for (int q = 0; q < 128; q++) want += av[size_t(i * 128 + q)] * std::sqrt(bv[size_t(q * 96 + j)] * bv[size_t(q * 96 + j)] + 1);
      EXPECT_NEAR(got[size_t(i * 96 + j)], want, 1e-3) << i << "," << j;
    }
}

// A permuted value asked for as flat storage (torch's x.permute(0, 2, 3, 1).contiguous(),
// attention's transpose(1, 2).contiguous()) iterates in the permuted shape: one flat loop
// read each element through divisions and remainders, 5-10x slower.
TEST(Lowering, FlatCopyOfAPermutedValueIteratesItsShape) {
  Tensor x = values({4, 6, 5, 8});
  Tensor y = x.binary(Op::Mul, x).permute({0, 2, 3, 1}).reshape({960});
  Kernel k = only_kernel(y);
  EXPECT_EQ(k.shape, (Shape{4, 5, 8, 6}));
  std::string ir = llvm_ir(k);
  for (const char* op : {" urem ", " udiv "}) EXPECT_EQ(ir.find(op), std::string::npos) << op;
  std::vector<double> xv = to_doubles(x), want;
  for (int n = 0; n < 4; n++)
    for (int h = 0; h < 5; h++)
      for (int w = 0; w < 8; w++)
        for (int c = 0; c < 6; c++) {
          float v = float(xv[size_t(((n * 6 + c) * 5 + h) * 8 + w)]);
          want.push_back(double(v * v));
        }
  std::vector<double> got = to_doubles(y);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], want[i]) << i;
}

// A channel tile's computed row operand (a LayerNorm's output feeding a linear layer, its row
// statistics reduces inside it) is evaluated once per (row, reduce step) into a buffer before
// the column panels, its statistics once per row: evaluated inside the tile's reduce loop, the
// statistics ran once per step and panel (a transformer block's MLP: 356 ms, now 2.5 ms). The
// IR allocates the row buffer beside the panels; the values equal a plain evaluation's.
TEST(Lowering, ComputedRowOperandsOfChannelTilesArePackedOncePerRow) {
  const int64_t B = 3, T = 10, K = 40, N = 80;
  Tensor x = values({B, T, K}), w = values({N, K});
  Tensor::realize_all({x, w});
  auto row_mean = [](const Tensor& t) {
    return t.reduce(ReduceOp::Sum, {2}, true)
        .binary(Op::Mul, Tensor::full({B, T, 1}, Scalar::from_double(1.0 / K), DType::Float32))
        .expand({B, T, K});
  };
  Tensor centered = x.binary(Op::Sub, row_mean(x));
  Tensor normed = centered.binary(Op::Mul, row_mean(centered.binary(Op::Mul, centered)).unary(Op::Sqrt).unary(Op::Recip));
  Tensor y = normed.reshape({B, T, 1, K}).expand({B, T, N, K})
                 .binary(Op::Mul, w.reshape({1, 1, N, K}).expand({B, T, N, K}))
                 .reduce(ReduceOp::Sum, {3}, false);
  Kernel k = only_kernel(y);
  std::string ir = llvm_ir(k);
  size_t scratch_buffers = 0;
  for (size_t at = ir.find("call i8* @tiny_scratch_alloc"); at != std::string::npos; at = ir.find("call i8* @tiny_scratch_alloc", at + 1)) scratch_buffers++;
  EXPECT_EQ(scratch_buffers, 2u) << "the panels of w.T and the rows of the normalized x";
  std::vector<double> xv = to_doubles(x), wv = to_doubles(w);
  std::vector<double> got = to_doubles(y);
  ASSERT_EQ(got.size(), size_t(B * T * N));
  for (int64_t r = 0; r < B * T; r++) {
    double mean = 0, var = 0;
    for (int64_t q = 0; q < K; q++) mean += xv[size_t(r * K + q)];
    mean /= K;
    for (int64_t q = 0; q < K; q++) var += (xv[size_t(r * K + q)] - mean) * (xv[size_t(r * K + q)] - mean);
    double rstd = 1 / std::sqrt(var / K);
    for (int64_t n = 0; n < N; n++) {
      double want = 0;
      for (int64_t q = 0; q < K; q++) want += (xv[size_t(r * K + q)] - mean) * rstd * wv[size_t(n * K + q)];
      EXPECT_NEAR(got[size_t(r * N + n)], want, 1e-4) << r << ", " << n;
    }
  }
}

// A weight gradient's computed `a`, grad_output (positions, channels) through per-channel and
// per-position terms, read as (channels, positions): its loads move along the tile's rows, so
// it is packed step by step, each step's rows in one vectorized loop ("a.by_step"; row by row
// its evaluation ran scalar and took 84 % of ConvNeXt's 96 x 384 weight gradients). The
// product matches its direct sum, partial tiles included.
TEST(Lowering, TransposedComputedRowOperandsArePackedStepByStep) {
  // the threads split the channels (each packs all rows), then the rows (each packs its own)
  for (auto [R, M, N] : {std::tuple<int64_t, int64_t, int64_t>{72, 28, 320}, {72, 40, 48}, {72, 200, 32}}) {
  Tensor x = values({R, M}), per_channel = values({1, M}), per_position = values({R, 1}), h = values({R, N});
  Tensor g = x.binary(Op::Mul, per_channel.expand({R, M})).binary(Op::Add, per_position.expand({R, M}));
  Tensor dw = g.permute({1, 0}).matmul(h);  // (M, N)
  Kernel k = only_kernel(dw);
  EXPECT_NE(llvm_ir(k).find("a.by_step"), std::string::npos);
  std::vector<double> xv = to_doubles(x), cv = to_doubles(per_channel), pv = to_doubles(per_position),
                      hv = to_doubles(h), got = to_doubles(dw);
  ASSERT_EQ(got.size(), size_t(M * N));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double want = 0;
      for (int64_t r = 0; r < R; r++) want += (xv[size_t(r * M + m)] * cv[size_t(m)] + pv[size_t(r)]) * hv[size_t(r * N + n)];
      ASSERT_NEAR(got[size_t(m * N + n)], want, 1e-4) << m << ", " << n;
    }
  }
}

// A row operand read through attention's head permutation, (B, H, T, D) as (B, T, H * D),
// steps through its storage by k / D and k % D: its rows are copied once, before the
// panels, into contiguous rows (runs of D floats 4 * T * D bytes apart were too short for
// the prefetchers: 4.8 ms for a transformer's output projection, 3.8 so, 2.6 on a copy).
// A contiguous one is read in place.
TEST(Lowering, RowOperandsReadThroughHeadPermutationsArePacked) {
  const int64_t B = 2, H = 3, T = 10, D = 12, K = H * D, N = 40;
  Tensor heads = values({B, H, T, D}), w = values({N, K}), flat = values({B, T, K});
  Tensor::realize_all({heads, w, flat});
  auto linear = [&](const Tensor& a) {
    return a.reshape({B, T, 1, K}).expand({B, T, N, K})
        .binary(Op::Mul, w.reshape({1, 1, N, K}).expand({B, T, N, K}))
        .reduce(ReduceOp::Sum, {3}, false);
  };
  auto scratch_buffers = [](const Tensor& t) {
    std::string ir = llvm_ir(only_kernel(t));
    size_t n = 0;
    for (size_t at = ir.find("call i8* @tiny_scratch_alloc"); at != std::string::npos; at = ir.find("call i8* @tiny_scratch_alloc", at + 1)) n++;
    return n;
  };
  Tensor y = linear(heads.permute({0, 2, 1, 3}).reshape({B, T, K}));
  EXPECT_EQ(scratch_buffers(y), 2u) << "the panels of w.T and the rows of the permuted heads";
  EXPECT_EQ(scratch_buffers(linear(flat)), 1u) << "the panels of w.T only";
  std::vector<double> hv = to_doubles(heads), wv = to_doubles(w), got = to_doubles(y);
  ASSERT_EQ(got.size(), size_t(B * T * N));
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t n = 0; n < N; n++) {
        double want = 0;
        for (int64_t q = 0; q < K; q++) want += hv[size_t(((b * H + q / D) * T + t) * D + q % D)] * wv[size_t(n * K + q)];
        EXPECT_NEAR(got[size_t((b * T + t) * N + n)], want, 1e-4) << b << ", " << t << ", " << n;
      }
}

// A linear layer's weight panels are packed one at a time, right before their tiles, where no
// loop outside the tiles reuses them (x @ w.T with the rows and the channels the only dims; the
// channels not a whole number of panels) and they are more than the caches keep. Panels that
// fit are packed first, the tiles of rows outside (ChannelTile::rows_outside). Where the tiles
// run once per image (a convolution's rows within an image), all panels are packed first and
// serve every image.
TEST(Lowering, PanelsReadOncePerCallArePackedPerTile) {
  for (int64_t K : {1400, 70}) {  // 7 panels (6 whole, of 32 channels, and one of 8): 1.25 MiB, 62 KiB
    const int64_t M = 20, N = 200;
    Tensor x = values({M, K}), w = values({N, K});
    Tensor::realize_all({x, w});
    Tensor y = x.reshape({M, 1, K}).expand({M, N, K})
                   .binary(Op::Mul, w.reshape({1, N, K}).expand({M, N, K}))
                   .reduce(ReduceOp::Sum, {2}, false);
    for (const CpuTarget& target : {kAvx512, kAvx2}) {
      CpuPlan p = lower_cpu(only_kernel(y), target);
      ASSERT_TRUE(p.channel);
      EXPECT_EQ(p.channel->pack_per_tile, K == 1400) << describe(p);
      EXPECT_EQ(p.channel->rows_outside, K == 70) << describe(p);
    }
    expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), M, K, N, true, 1e-3);
  }
  // per image: 8 images of a 16x16 map, 64 -> 64 channels
  const int64_t B = 8, C = 64, OC = 64, H = 16;
  Tensor img = values({B, C, H, H}), wc = values({OC, C});
  Tensor conv = img.reshape({B, 1, C, H, H}).expand({B, OC, C, H, H})
                    .binary(Op::Mul, wc.reshape({1, OC, C, 1, 1}).expand({B, OC, C, H, H}))
                    .reduce(ReduceOp::Sum, {2}, false);
  CpuPlan pc = lower_cpu(only_kernel(conv), kAvx512);
  ASSERT_TRUE(pc.channel);
  EXPECT_FALSE(pc.channel->pack_per_tile) << describe(pc);
}

// A linear layer over a small map's positions, channels last (ConvNeXt's MLP at 7x7 and 4x4): its
// rows along the last dim before the channels are too few for a tile, so they continue over the
// dims before (images and map rows), one tile of rows across them.
TEST(Lowering, ShortRowsOfALinearLayerContinueOverTheDimsBefore) {
  const int64_t B = 3, H = 4, K = 48, N = 64;
  Tensor x = values({B, H, H, K}), w = values({N, K});
  Tensor::realize_all({x, w});
  Tensor y = x.reshape({B, H, H, 1, K}).expand({B, H, H, N, K})
                 .binary(Op::Mul, w.reshape({1, 1, 1, N, K}).expand({B, H, H, N, K}))
                 .reduce(ReduceOp::Sum, {4}, false);
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(only_kernel(y), target);
    ASSERT_TRUE(p.channel) << describe(p);
    EXPECT_EQ(p.channel->j, 3);
    EXPECT_EQ(p.channel->row_dims(), (std::vector<int>{0, 1, 2}));
  }
  expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), B * H * H, K, N, true);
  // the weight unit-stride along the channels (an input gradient, x @ w): the same rows, not
  // a tile per image with the images looped outside
  Tensor wk = values({K, N});
  Tensor::realize_all({wk});
  Tensor z = x.reshape({B, H, H, K, 1}).expand({B, H, H, K, N})
                 .binary(Op::Mul, wk.reshape({1, 1, 1, K, N}).expand({B, H, H, K, N}))
                 .reduce(ReduceOp::Sum, {3}, false);
  CpuPlan pz = lower_cpu(only_kernel(z), kAvx512);
  ASSERT_TRUE(pz.channel) << describe(pz);
  EXPECT_EQ(pz.channel->row_dims(), (std::vector<int>{0, 1, 2})) << describe(pz);
  expect_matmul(to_doubles(z), to_doubles(x), to_doubles(wk), B * H * H, K, N, false);
}

// A product of few rows with a unit-stride b (an RNN step's hidden-state gradient, 8 rows @ w)
// reads b in place: packing all of b for 8 rows cost more than the product. From 16 rows sharing
// b (8 rows in each of 2 images) b is packed as before. Values with partial tiles of channels.
TEST(Lowering, FewRowsReadAUnitStrideWeightInPlace) {
  const int64_t K = 70, N = 200;
  for (int64_t images : {1, 2}) {
    const int64_t M = 8;
    Tensor x = values({images, M, K}), w = values({K, N});
    Tensor::realize_all({x, w});
    Tensor y = x.reshape({images, M, K, 1}).expand({images, M, K, N})
                   .binary(Op::Mul, w.reshape({1, 1, K, N}).expand({images, M, K, N}))
                   .reduce(ReduceOp::Sum, {2}, false);
    for (const CpuTarget& target : {kAvx512, kAvx2}) {
      CpuPlan p = lower_cpu(only_kernel(y), target);
      ASSERT_TRUE(p.channel) << describe(p);
      EXPECT_EQ(p.channel->unit, images == 1) << describe(p);
    }
    expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), images * M, K, N, false);
  }
}

// A product of 4 rows (an LSTM step's batch) by a unit-stride weight (4 x 128 @ 128 x 512, kept
// with the reduce as a unit dim after the channels): the threads split the channels, each
// reading its share of the weight in place, where split over the rows each read all of it with
// two of its tile's four rows (an LSTM step's gates: 5.7 us with the weight's transpose packed,
// 9.3 in place with the rows split, 3.4 with the channels split).
TEST(Lowering, FewRowsSplitTheChannelsOfAWeightReadInPlace) {
  const int64_t M = 4, K = 128, N = 512;
  Tensor x = values({M, K}), w = values({K, N});
  Tensor::realize_all({x, w});
  Tensor y = x.reshape({M, 1, K}).expand({M, N, K})
                 .binary(Op::Mul, w.permute({1, 0}).reshape({1, N, K}).expand({M, N, K}))
                 .reduce(ReduceOp::Sum, {2}, true);
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(only_kernel(y), target);
    ASSERT_TRUE(p.channel) << describe(p);
    EXPECT_TRUE(p.channel->unit) << describe(p);
    EXPECT_EQ(p.parallel_dim, 1) << describe(p);
  }
  expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), M, K, N, false);
}

// The same product without the unit dim takes a vector tile of all 4 rows: its threads split
// the columns too (whole tiles each, the last slice with the partial one), each reading its share
// of the weight (an LSTM step's hidden gradient: 7.6 -> 4.5 us).
TEST(Lowering, VectorTilesOfAllRowsSplitTheColumns) {
  for (auto [M, K, N] : {std::array<int64_t, 3>{4, 512, 128}, std::array<int64_t, 3>{3, 70, 100}}) {
    Tensor x = values({M, K}), w = values({K, N});
    Tensor::realize_all({x, w});
    Tensor y = x.reshape({M, K, 1}).expand({M, K, N})
                   .binary(Op::Mul, w.reshape({1, K, N}).expand({M, K, N}))
                   .reduce(ReduceOp::Sum, {1}, false);
    for (const CpuTarget& target : {kAvx512, kAvx2}) {
      CpuPlan p = lower_cpu(only_kernel(y), target);
      ASSERT_TRUE(p.vector_tile) << describe(p);
      EXPECT_EQ(p.parallel_dim, p.vector_tile->d) << describe(p);
      EXPECT_EQ(p.parallel_grain, p.vector_tile->cols) << describe(p);
    }
    expect_matmul(to_doubles(y), to_doubles(x), to_doubles(w), M, K, N, false);
  }
}

// A weight gradient over 8 images at 1x1 (a squeeze-excitation block's, 32 x 120): its
// vector tile holds 2 rows over a reduce this short, not 8 (each output of the unrolled tile
// is code of its own: LLVM took 0.4-0.7 s to optimize each such kernel of MobileNetV3's step,
// which then ran for microseconds; a depthwise 3x3 convolution's 9 taps ran faster so too).
TEST(Lowering, VectorTilesOverShortReducesTakeFewRows) {
  const int64_t B = 8, O = 32, I = 120;
  Tensor g = values({O, B}), x = values({B, I});  // g: the gradient, images last
  Tensor::realize_all({g, x});
  Tensor w = g.reshape({O, B, 1}).expand({O, B, I})
                 .binary(Op::Mul, x.reshape({1, B, I}).expand({O, B, I}))
                 .reduce(ReduceOp::Sum, {1}, false);
  for (const CpuTarget& target : {kAvx512, kAvx2}) {
    CpuPlan p = lower_cpu(only_kernel(w), target);
    ASSERT_TRUE(p.vector_tile) << describe(p);
    EXPECT_EQ(p.vector_tile->rows, 2) << describe(p);
  }
  expect_matmul(to_doubles(w), to_doubles(g), to_doubles(x), O, B, I, false);
}

// Attention's products take channel tiles too: softmax(s) @ v, whose row factor holds the
// softmax's row sum (a reduce computed once per tile row), and p @ (v + bias), whose column
// factor is computed per head (packed per index of the dims before the tile's, pack_inner).
// Before, both took per-output register tiles: 17 and 14 ms for a transformer block's heads.
TEST(Lowering, AttentionProductsTakeChannelTiles) {
  const int64_t H = 3, T = 64, D = 48;
  Tensor e = values({H, T, T}).unary(Op::Exp), v = values({H, T, D}), bias = values({D});
  Tensor::realize_all({e, v, bias});
  Tensor p = e.binary(Op::Div, e.reduce(ReduceOp::Sum, {2}, true).expand({H, T, T}));
  auto bmm = [&](const Tensor& a, const Tensor& b) {
    return a.reshape({H, T, 1, T}).expand({H, T, D, T})
        .binary(Op::Mul, b.permute({0, 2, 1}).reshape({H, 1, D, T}).expand({H, T, D, T}))
        .reduce(ReduceOp::Sum, {3}, false);
  };
  Tensor vb = v.binary(Op::Add, bias.reshape({1, 1, D}).expand({H, T, D}));
  Tensor soft = bmm(p, v), biased = bmm(e, vb);
  for (const Tensor* t : {&soft, &biased}) {
    CpuPlan plan = lower_cpu(only_kernel(*t), kAvx512);
    ASSERT_TRUE(plan.channel) << (t == &soft ? "softmax @ v" : "p @ (v + bias)");
    EXPECT_EQ(plan.channel->pack_inner, t == &biased);
  }
  std::vector<double> ev = to_doubles(e), vv = to_doubles(v), bv = to_doubles(bias);
  std::vector<double> got_soft = to_doubles(soft), got_biased = to_doubles(biased);
  for (int64_t h = 0; h < H; h++)
    for (int64_t t = 0; t < T; t++) {
      double sum = 0;
      for (int64_t s = 0; s < T; s++) sum += ev[size_t((h * T + t) * T + s)];
      for (int64_t d = 0; d < D; d++) {
        double want_soft = 0, want_biased = 0;
        for (int64_t s = 0; s < T; s++) {
          double es = ev[size_t((h * T + t) * T + s)], vs = vv[size_t((h * T + s) * D + d)];
          want_soft += es / sum * vs;
          want_biased += es * (vs + bv[size_t(d)]);
        }
        size_t at = size_t((h * T + t) * D + d);
        EXPECT_NEAR(got_soft[at], want_soft, 1e-4) << h << ", " << t << ", " << d;
        EXPECT_NEAR(got_biased[at], want_biased, 1e-4 * std::max(1.0, std::fabs(want_biased))) << h << ", " << t << ", " << d;
      }
    }
}

// A 3x3 stride-2 max pool over a padded input: its taps are emitted in line (no 3-step
// loops, which vectorized into masked gathers of 4 with 3 lanes used) and the loop over the
// output's last dim, 8 outputs of which 7 are past the padded one, is vectorized anyway.
TEST(Lowering, PoolingWindowsRunInLineAndWidenTheOutputLoop) {
  const int64_t H = 13, W = 16, OH = 7, OW = 8;  // odd height: a partial last window row
  Tensor x = values({2, 3, H, W});
  const Ranges pads{{0, 0}, {0, 0}, {1, 1}, {1, 1}};
  Tensor inside = Tensor::full({2, 3, H, W}, Scalar::from_bool(true), DType::Bool).pad(pads);
  Tensor padded = Tensor::where(inside, x.pad(pads), Tensor::full({2, 3, H + 2, W + 2}, Scalar::from_double(-INFINITY), DType::Float32));
  Tensor windows = padded.as_strided({2, 3, OH, OW, 3, 3}, {3 * (H + 2) * (W + 2), (H + 2) * (W + 2), 2 * (W + 2), 2, W + 2, 1}, 0);
  Tensor pooled = windows.reduce(ReduceOp::Max, {4, 5}, false);
  std::string ir = llvm_ir(only_kernel(pooled));
  EXPECT_NE(ir.find("llvm.loop.vectorize.enable"), std::string::npos);
  std::vector<double> xv = to_doubles(x), got = to_doubles(pooled);
  ASSERT_EQ(got.size(), size_t(2 * 3 * OH * OW));
  for (int p = 0; p < 6; p++)
    for (int oh = 0; oh < OH; oh++)
      for (int ow = 0; ow < OW; ow++) {
        double want = -INFINITY;
        for (int kh = 0; kh < 3; kh++)
          for (int kw = 0; kw < 3; kw++) {
            int h = 2 * oh - 1 + kh, w = 2 * ow - 1 + kw;
            if (h >= 0 && h < H && w >= 0 && w < W) want = std::max(want, xv[size_t((p * H + h) * W + w)]);
          }
        EXPECT_EQ(got[size_t((p * OH + oh) * OW + ow)], want) << p << " " << oh << " " << ow;
      }
}

// An embedding (or index_select, or x[idx, 3:23:2]) gathers whole runs: its flat index is a
// row read at run time times the row length plus the column. The row is clamped once, to rows
// whose whole run lies in the table, instead of each element's flat index on its own, so the
// run's loads stay consecutive and vectorize (one element per compare and select before:
// 3x PyTorch's time for a 50000 x 512 table).
TEST(Lowering, GatheredRunsClampTheirRowOnce) {
  const int64_t R = 100, C = 37, N = 6;
  Tensor table = values({R, C});
  Tensor rows = from(std::vector<int64_t>{0, 99, 5, 42, 99, 0}, {N, 1});
  Tensor::realize_all({table, rows});
  auto gathered = [&](int64_t start, int64_t step, int64_t n) {
    Tensor row_starts = rows.binary(Op::Mul, Tensor::full({N, 1}, Scalar::from_int(C), DType::Int64)).expand({N, n});
    Tensor cols = Tensor::arange(n, Scalar::from_int(start), Scalar::from_int(step), DType::Int64).reshape({1, n}).expand({N, n});
    return table.reshape({R * C}).gather(row_starts.binary(Op::Add, cols));
  };
  std::vector<double> tv = to_doubles(table);
  const std::vector<int64_t> row_list{0, 99, 5, 42, 99, 0};
  for (auto [start, step, n] : {std::tuple<int64_t, int64_t, int64_t>{0, 1, C}, {3, 2, 10}}) {
    Tensor g = gathered(start, step, n);
    std::string ir = llvm_ir(only_kernel(g));
    EXPECT_EQ(ir.find(std::to_string(R * C)), std::string::npos) << "no element's flat index is clamped";
    EXPECT_NE(ir.find(", " + std::to_string(R) + "\n"), std::string::npos) << "the row is compared with the row count";
    std::vector<double> got = to_doubles(g);
    ASSERT_EQ(got.size(), size_t(N * n));
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < n; j++)
        EXPECT_EQ(got[size_t(i * n + j)], tv[size_t(row_list[size_t(i)] * C + start + j * step)]) << i << ", " << j;
  }
  // A row out of range (the torch layer raises first) reads inside the table all the same:
  // the clamped row's run, not memory past the buffer.
  Tensor bad = from(std::vector<int64_t>{-3, 100, int64_t(1) << 40, 7}, {4, 1});
  Tensor::realize_all({bad});
  Tensor g = table.reshape({R * C}).gather(bad.binary(Op::Mul, Tensor::full({4, 1}, Scalar::from_int(C), DType::Int64))
                                               .expand({4, C})
                                               .binary(Op::Add, Tensor::arange(C, Scalar::from_int(0), Scalar::from_int(1), DType::Int64)
                                                                    .reshape({1, C})
                                                                    .expand({4, C})));
  std::vector<double> got = to_doubles(g);
  for (int64_t j = 0; j < C; j++) {
    for (int64_t i = 0; i < 3; i++) EXPECT_EQ(got[size_t(i * C + j)], tv[size_t(j)]) << "row " << i << " reads row 0";
    EXPECT_EQ(got[size_t(3 * C + j)], tv[size_t(7 * C + j)]);
  }
}

// A 3x3 convolution over 2x2 maps (resnet18's layer4 at 64x64 images), padding stored as the
// torch layer stores it (in the same schedule, or by an earlier one: that node has dropped its
// sources since) or fused as a mask: the channel tile's rows are the images at one
// position (row_fastest), tiles dividing the batch, so its reduce skips the taps that read
// padding. The results match a direct sum, whatever the batch's divisors.
// Maps of 1x1 too: their output channels are the last dim of more than one element, the rows
// the images (resnet18's layer4 at 32x32 input ran its plain loops, 10x slower).
TEST(Lowering, SmallConvolutionMapsSkipTheirPaddingTaps) {
  const int64_t C = 64, OC = 128;  // channels enough for the threads to split them
  for (int64_t H : {2, 1})
  for (int64_t N : {16, 10, 3}) {
    const int64_t P = H + 2;
    for (int mode : {0, 1, 2}) {  // stored, stored earlier, fused
      SCOPED_TRACE("H " + std::to_string(H) + " N " + std::to_string(N) + " mode " + std::to_string(mode));
      std::vector<float> xv(size_t(N * C * H * H)), wv(size_t(OC * C * 9));
      for (size_t i = 0; i < xv.size(); i++) xv[i] = float(int(i * 7 % 13) - 6) * 0.25f;
      for (size_t i = 0; i < wv.size(); i++) wv[i] = float(int(i * 5 % 11) - 5) * 0.125f;
      Tensor x = from(xv, {N, C, H, H}), w = from(wv, {OC, C, 3, 3});
      Tensor xp = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}});
      if (mode < 2) xp = xp.contiguous();
      if (mode == 1) Tensor::realize_all({xp});
      Tensor win = xp.as_strided({N, 1, 1, H, H, C, 3, 3}, {C * P * P, C * P * P, 0, P, 1, P * P, P, 1}, 0)
                       .expand({N, 1, OC, H, H, C, 3, 3});
      Tensor conv = win.binary(Op::Mul, w.reshape({1, 1, OC, 1, 1, C, 3, 3}).expand({N, 1, OC, H, H, C, 3, 3}))
                        .reduce(ReduceOp::Sum, {5, 6, 7}, false);
      Schedule s = create_schedule({conv.node()});
      CpuPlan plan = lower_cpu(s.kernels.back(), kAvx512);
      ASSERT_TRUE(plan.channel);
      if (N >= 7) {  // the rows are the images: tiles of a divisor of N (a copy stored earlier
                     // still says where its padding is: realized_box)
        EXPECT_EQ(plan.channel->row_fastest, 0);
        EXPECT_EQ(plan.channel->row_dims().back(), 0);
        EXPECT_EQ(N % plan.channel->rows, 0);
      }
      expect_conv3x3(to_doubles(conv), std::vector<double>(xv.begin(), xv.end()),
                     std::vector<double>(wv.begin(), wv.end()), N, C, OC, H, H, 1);
    }
  }
}

// Static taps: a 4x4 map's convolution (its 16 positions a few tiles of rows), an 8x8 map's (a
// tile per row of the map) and a 2x2 map's weight gradient (its 9 taps one tile of rows,
// grad_output channels-last) unroll innermost reduce loops, so a row that reads only padding
// at a step has no FMA there. The same loops over a plain buffer of the padded shape (its
// border not zero) skip nothing, and each computes its direct sum.
TEST(Lowering, StaticTapsDropTheRowsThatReadPadding) {
  const bool avx512 = LLVMJit::get().vector_unit().registers >= 32;
  auto count_fmas = [](const Tensor& t) {
    std::string ir = llvm_ir(only_kernel(t));
    size_t n = 0;
    for (size_t at = ir.find("call <"); at != std::string::npos; at = ir.find("call <", at + 1))
      n += ir.compare(ir.find('@', at), 15, "@llvm.fmuladd.v") == 0;
    return n;
  };
  auto fill = [](int64_t n, int mul, int mod, double scale, int shift) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); i++) v[i] = float((int(i * size_t(mul) % size_t(mod)) + shift) * scale);
    return v;
  };
  for (int64_t H : {4, 8}) {  // forward
    SCOPED_TRACE("H " + std::to_string(H));
    const int64_t N = 3, C = 64, OC = 64, P = H + 2;
    std::vector<float> xv = fill(N * C * H * H, 7, 13, 0.25, -6), wv = fill(OC * C * 9, 5, 11, 0.125, -5);
    std::vector<float> bv = fill(N * C * P * P, 3, 7, 0.5, 1);  // no zeros
    Tensor x = from(xv, {N, C, H, H}), w = from(wv, {OC, C, 3, 3}), plain = from(bv, {N, C, P, P});
    Tensor xp = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).contiguous();
    Tensor::realize_all({xp});
    auto conv = [&](const Tensor& in) {
      return in.as_strided({N, 1, 1, H, H, C, 3, 3}, {C * P * P, C * P * P, 0, P, 1, P * P, P, 1}, 0)
          .expand({N, 1, OC, H, H, C, 3, 3})
          .binary(Op::Mul, w.reshape({1, 1, OC, 1, 1, C, 3, 3}).expand({N, 1, OC, H, H, C, 3, 3}))
          .reduce(ReduceOp::Sum, {5, 6, 7}, false);
    };
    Tensor padded = conv(xp), over_plain = conv(plain);
    CpuPlan plan = lower_cpu(only_kernel(padded), kAvx512);
    ASSERT_TRUE(plan.channel);
    EXPECT_TRUE(plan.channel->padding_taps);
    EXPECT_FALSE(lower_cpu(only_kernel(over_plain), kAvx512).channel->padding_taps);
    // Vector FMAs, two vectors of channels per (row, step) pair that reads x. 4x4 with AVX-512:
    // 2 tiles of 8 positions, all 9 taps unrolled, 10 x 10 of the 12 x 12 (position, tap)
    // pairs along the two dims. Otherwise a tile is positions along x at a row from an outer
    // loop (8x8: a whole row, the loop over the tiles aligned to them; with 16 registers, 4
    // positions): the taps along x are unrolled (10 of 12 pairs at 4x4, 22 of 24 at 8x8), those
    // along y stay a loop over their range, known at run time only.
    if (H == 4) EXPECT_EQ(count_fmas(padded), avx512 ? 2u * 100u : 2u * 10u);
    else EXPECT_EQ(count_fmas(padded), 2u * 22u);
    expect_conv3x3(to_doubles(padded), std::vector<double>(xv.begin(), xv.end()),
                   std::vector<double>(wv.begin(), wv.end()), N, C, OC, H, H, 1);
    expect_conv3x3(to_doubles(over_plain), std::vector<double>(bv.begin(), bv.end()),
                   std::vector<double>(wv.begin(), wv.end()), N, C, OC, P, H, 0);
  }
  {  // weight gradient, 2x2 outputs: gw[c, ky, kx, o] = sum_{n, y, x} xp[n, c, y + ky, x + kx] g[n, y, x, o]
    const int64_t N = 16, C = 32, OC = 64, H = 2, P = H + 2;
    std::vector<float> xv = fill(N * C * H * H, 7, 13, 0.25, -6), gv = fill(N * H * H * OC, 5, 11, 0.125, -5);
    std::vector<float> bv = fill(N * C * P * P, 3, 7, 0.5, 1);
    Tensor x = from(xv, {N, C, H, H}), g = from(gv, {N, H, H, OC}), plain = from(bv, {N, C, P, P});
    Tensor xp = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).contiguous();
    Tensor::realize_all({xp});
    const Shape full{C, 3, 3, OC, N, H, H};
    auto wgrad = [&](const Tensor& in) {
      return in.as_strided(full, {P * P, P, 1, 0, C * P * P, P, 1}, 0)
          .binary(Op::Mul, g.as_strided(full, {0, 0, 0, 1, H * H * OC, H * OC, OC}, 0))
          .reduce(ReduceOp::Sum, {4, 5, 6}, false);
    };
    Tensor padded = wgrad(xp), over_plain = wgrad(plain);
    CpuPlan plan = lower_cpu(only_kernel(padded), kAvx512);
    ASSERT_TRUE(plan.channel);
    EXPECT_TRUE(plan.channel->padding_taps);
    // 4 x 4 of the 6 x 6 (tap, position) pairs; with 16 registers a tile is the 3 taps along x
    // at a tap along y from an outer loop: 4 of the 6 pairs along x (the positions along y a
    // loop over their range)
    EXPECT_EQ(count_fmas(padded), avx512 ? 2u * 16u : 2u * 4u);
    for (auto [t, in, pad] : {std::tuple{padded, xv, int64_t(1)}, std::tuple{over_plain, bv, int64_t(0)}}) {
      const int64_t S = pad ? H : P;
      std::vector<double> got = to_doubles(t);
      for (int64_t c = 0; c < C; c++)
        for (int64_t ky = 0; ky < 3; ky++)
          for (int64_t kx = 0; kx < 3; kx++)
            for (int64_t o = 0; o < OC; o++) {
              double want = 0;
              for (int64_t n = 0; n < N; n++)
                for (int64_t y = 0; y < H; y++)
                  for (int64_t xx = 0; xx < H; xx++) {
                    int64_t iy = y + ky - pad, ix = xx + kx - pad;
                    if (iy < 0 || iy >= S || ix < 0 || ix >= S) continue;
                    want += double(in[size_t(((n * C + c) * S + iy) * S + ix)]) * gv[size_t(((n * H + y) * H + xx) * OC + o)];
                  }
              ASSERT_NEAR(got[size_t(((c * 3 + ky) * 3 + kx) * OC + o)], want, 1e-3) << c << " " << ky << " " << kx << " " << o;
            }
    }
  }
}

// A matmul whose rows of `a` lie a multiple of 2 KiB apart (K = 512, 1024, ...): a tile's row
// streams would share L1 sets, so its rows are copied first, a line more than K apart (and
// read in place otherwise). The values match a direct sum either way, ragged tiles included.
TEST(Lowering, MatmulRowsThatWouldAliasInL1AreCopiedApart) {
  for (int64_t K : {512, 520}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t M = 37, N = 70;
    Tensor a = values({M, K}), b = values({K, N});
    Tensor::realize_all({a, b});
    Tensor y = a.matmul(b);
    std::string ir = llvm_ir(only_kernel(y));
    size_t scratch_buffers = 0;
    for (size_t at = ir.find("call i8* @tiny_scratch_alloc"); at != std::string::npos; at = ir.find("call i8* @tiny_scratch_alloc", at + 1))
      scratch_buffers++;
    EXPECT_EQ(scratch_buffers, K % 512 == 0 ? 2u : 1u) << "the panels of b, and a's rows where they alias";
    expect_matmul(to_doubles(y), to_doubles(a), to_doubles(b), M, K, N, false, 1e-3);
  }
}

// A kernel that skips the padding taps of a padded copy computes something else than the same
// loops over a plain buffer of that shape (its border not zero): their keys differ, so the
// second does not run the first's program. A padded copy stored by an earlier schedule keeps
// its box (realized_box), in its node and in the keys of the graphs that read it.
TEST(Lowering, PaddedCopiesKeepTheirPaddingAndTheirOwnPrograms) {
  const int64_t N = 16, C = 64, OC = 128, H = 2, P = H + 2;  // channels enough to skip taps
  std::vector<float> xv(size_t(N * C * H * H)), bv(size_t(N * C * P * P)), wv(size_t(OC * C * 9));
  for (size_t i = 0; i < xv.size(); i++) xv[i] = float(int(i * 7 % 13) - 6) * 0.25f;
  for (size_t i = 0; i < bv.size(); i++) bv[i] = float(int(i * 3 % 7) + 1) * 0.5f;  // no zeros
  for (size_t i = 0; i < wv.size(); i++) wv[i] = float(int(i * 5 % 11) - 5) * 0.125f;
  Tensor x = from(xv, {N, C, H, H}), plain = from(bv, {N, C, P, P}), w = from(wv, {OC, C, 3, 3});
  auto conv = [&](const Tensor& xp) {
    Tensor win = xp.as_strided({N, 1, 1, H, H, C, 3, 3}, {C * P * P, C * P * P, 0, P, 1, P * P, P, 1}, 0)
                     .expand({N, 1, OC, H, H, C, 3, 3});
    return win.binary(Op::Mul, w.reshape({1, 1, OC, 1, 1, C, 3, 3}).expand({N, 1, OC, H, H, C, 3, 3}))
        .reduce(ReduceOp::Sum, {5, 6, 7}, false);
  };
  auto check = [&](const Tensor& y, const std::vector<float>& in, int64_t pad) {
    expect_conv3x3(to_doubles(y), std::vector<double>(in.begin(), in.end()), std::vector<double>(wv.begin(), wv.end()),
                   N, C, OC, H + 2 - 2 * pad, H, pad);
  };
  Tensor::realize_all({x, plain, w});
  Tensor padded = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).contiguous();
  Schedule s = create_schedule({conv(padded).node()});
  std::string padded_key = s.kernels.back().key();
  check(conv(padded), xv, 1);
  EXPECT_NE(padded_key, only_kernel(conv(plain)).key());
  check(conv(plain), bv, 0);  // after the padded one's program was built

  Tensor stored = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).contiguous();
  Tensor::realize_all({stored});
  EXPECT_EQ(stored.node()->realized_box(), (Box{{0, N}, {0, C}, {1, 3}, {1, 3}}));
  EXPECT_TRUE(plain.node()->realized_box().empty());
  EXPECT_EQ(only_kernel(conv(stored)).key(), padded_key);
  EXPECT_NE(graph_shape({conv(stored).node()}).key, graph_shape({conv(plain).node()}).key);
  check(conv(stored), xv, 1);
}

// A convolution's weight (OC, C, 3, 3) is copied into its panels by blocks of a vector's
// lanes of channels and steps, transposed in registers: where its C * 9 steps divide into
// such blocks, else per run of 9 taps, ascending or (flipped, as an input gradient reads the
// weight) descending in memory. The values match a direct sum in each case.
TEST(Lowering, WeightPanelsAreCopiedByTransposedBlocks) {
  for (int64_t C : {32, 5})
    for (bool flipped : {false, true}) {
      SCOPED_TRACE("C " + std::to_string(C) + (flipped ? " flipped" : ""));
      const int64_t N = 2, OC = 40, H = 6, P = H + 2;  // 40 channels: a partial panel too
      Tensor x = values({N, C, P, P}), w = values({OC, C, 3, 3});
      Tensor::realize_all({x, w});
      Tensor wk = flipped ? w.flip({false, false, true, true}) : w;
      Tensor win = x.as_strided({N, 1, 1, H, H, C, 3, 3}, {C * P * P, C * P * P, 0, P, 1, P * P, P, 1}, 0)
                       .expand({N, 1, OC, H, H, C, 3, 3});
      Tensor conv = win.binary(Op::Mul, wk.reshape({1, 1, OC, 1, 1, C, 3, 3}).expand({N, 1, OC, H, H, C, 3, 3}))
                        .reduce(ReduceOp::Sum, {5, 6, 7}, false);
      Kernel k = only_kernel(conv);
      ASSERT_TRUE(lower_cpu(k, kAvx512).channel);
      EXPECT_NE(llvm_ir(k).find("panel.transpose"), std::string::npos);
      expect_conv3x3(to_doubles(conv), to_doubles(x), to_doubles(w), N, C, OC, P, H, 0, flipped);
    }
}

// A depthwise convolution's rows computed as one run (rows_as_one_run in ops_conv.cpp: positions
// q = y*P + x of the padded width P, each reading the padded input from q on): its channels are
// rows of a vector tile along the run, not a channel tile of one row (two accumulators). Partial
// column tiles and the leftover positions match a direct sum.
TEST(Lowering, DepthwiseRunsTakeVectorTilesOverTheChannels) {
  const int64_t N = 2, C = 24, H = 14, K = 7, P = H + K - 1, run = (H - 1) * P + H;
  std::vector<float> xv(size_t(N * C * P * P)), wv(size_t(C * K * K));
  for (size_t i = 0; i < xv.size(); i++) xv[i] = float(int(i * 7 % 13) - 6) * 0.25f;
  for (size_t i = 0; i < wv.size(); i++) wv[i] = float(int(i * 5 % 11) - 5) * 0.125f;
  Tensor xp = from(xv, {N, C, P, P}), w = from(wv, {C, K, K});
  const Shape full{N, C, run, K, K};
  Tensor out = xp.as_strided(full, {C * P * P, P * P, 1, P, 1}, 0)
                   .binary(Op::Mul, w.reshape({1, C, 1, K, K}).expand(full))
                   .reduce(ReduceOp::Sum, {3, 4}, false);
  for (const CpuTarget& t : {kAvx512, kAvx2}) {
    CpuPlan plan = lower_cpu(only_kernel(out), t);
    EXPECT_FALSE(plan.channel);
    ASSERT_TRUE(plan.vector_tile);
    EXPECT_EQ(plan.vector_tile->d2, 1);
    EXPECT_EQ(plan.vector_tile->d, 2);
    EXPECT_GT(plan.vector_tile->rows, 1);
    EXPECT_EQ(plan.vector_tile->cols, 2 * t.lanes);
  }
  std::vector<double> got = to_doubles(out);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < run; q++) {
        double want = 0;
        for (int64_t ky = 0; ky < K; ky++)
          for (int64_t kx = 0; kx < K; kx++)
            want += double(xv[size_t((n * C + c) * P * P + q + ky * P + kx)]) * double(wv[size_t((c * K + ky) * K + kx)]);
        ASSERT_NEAR(got[size_t((n * C + c) * run + q)], want, 1e-3) << n << " " << c << " " << q;
      }
}

// A weight gradient over a linear layer's batch (128 rows; its second factor computed) with an
// optimizer's update fused after it, its panels in cache: the row tiles run outside the column tiles (ChannelTile::rows_outside), each
// storing along whole rows of the thread's channels, and the update runs as a parallel loop the
// vectorizer takes without its run-time overlap checks (five buffers are past their limit).
// Partial row tiles and the last, partial panel match the direct sums.
TEST(Lowering, ShortWeightGradientsStoreAlongRowsAndVectorizeTheirUpdate) {
  const int64_t R = 128, M = 96, N = 136;  // 96 rows: 6 tiles of 14 and one of 12; 136 = 4 * 32 + 8
  auto fill = [](int64_t n, int mul, int mod) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); i++) v[i] = float(int(i * size_t(mul) % size_t(mod)) - mod / 2) * 0.125f;
    return v;
  };
  std::vector<float> av = fill(R * M, 7, 13), bv = fill(R * N, 5, 11), mv = fill(M * N, 3, 7), vv = fill(M * N, 2, 5);
  Tensor a = from(av, {R, M}), b = from(bv, {R, N}), m = from(mv, {M, N}), v = from(vv, {M, N});
  auto scalar = [&](double s) { return Tensor::full({M, N}, Scalar::from_double(s), DType::Float32); };
  Tensor g = a.permute({1, 0}).matmul(b.binary(Op::Mul, b));  // b squared: computed into the panels
  Tensor m2 = m.binary(Op::Mul, scalar(0.9)).binary(Op::Add, g.binary(Op::Mul, scalar(0.1)));
  Tensor v2 = v.binary(Op::Mul, scalar(0.999)).binary(Op::Add, g.binary(Op::Mul, g).binary(Op::Mul, scalar(0.001)));
  Schedule s = create_schedule({g.node(), m2.node(), v2.node()});
  ASSERT_EQ(s.kernels.size(), 1u);
  CpuPlan plan = lower_cpu(s.kernels.back(), kAvx512);
  ASSERT_TRUE(plan.channel);
  EXPECT_TRUE(plan.channel->rows_outside);
  EXPECT_TRUE(plan.channel->epilogue_per_row_tile);  // three outputs, element-wise after the reduce
  EXPECT_EQ(plan.parallel_dim, plan.channel->j);
  EXPECT_NE(llvm_ir(s.kernels.back()).find("llvm.loop.parallel_accesses"), std::string::npos);
  Tensor::realize_all({g, m2, v2});
  std::vector<double> gg = to_doubles(g), mm = to_doubles(m2), vo = to_doubles(v2);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double want = 0;
      for (int64_t r = 0; r < R; r++) want += double(av[size_t(r * M + i)]) * double(bv[size_t(r * N + j)]) * bv[size_t(r * N + j)];
      const size_t at = size_t(i * N + j);
      ASSERT_NEAR(gg[at], want, 1e-3) << i << " " << j;
      ASSERT_NEAR(mm[at], 0.9 * mv[at] + 0.1 * want, 1e-3) << i << " " << j;
      ASSERT_NEAR(vo[at], 0.999 * vv[at] + 0.001 * want * want, 1e-2) << i << " " << j;
    }
}

// A channel tile's epilogue loop (here an exp of another input times the product) is a
// function of its own, called once per tile: in the kernel's function, the exp's constants
// were hoisted above the reduce loop and took the accumulators' registers (40 GMAC/s for a
// 128 x 384 x 1536 product, 96 without). Full, partial and leftover tiles all match.
TEST(Lowering, TileEpiloguesAreFunctionsOfTheirOwn) {
  const int64_t M = 37, K = 40, N = 80;  // 2 tiles of 14 rows and 9; 2 panels of 32 and 16 channels
  Tensor a = values({M, K}), b = values({K, N}), e = values({M, N});
  Tensor y = a.matmul(b).binary(Op::Mul, e.unary(Op::Exp));
  Kernel k = only_kernel(y);
  std::string ir = llvm_ir(k);
  EXPECT_NE(ir.find("define internal void @" + k.name()), std::string::npos) << ir;
  EXPECT_NE(ir.find(".epilogue("), std::string::npos);
  EXPECT_NE(ir.find("noinline"), std::string::npos);
  std::vector<double> av = to_doubles(a), bv = to_doubles(b), ev = to_doubles(e), got = to_doubles(y);
  ASSERT_EQ(got.size(), size_t(M * N));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double want = 0;
      for (int64_t q = 0; q < K; q++) want += av[size_t(i * K + q)] * bv[size_t(q * N + j)];
      want *= std::exp(ev[size_t(i * N + j)]);
      ASSERT_NEAR(got[size_t(i * N + j)], want, 1e-4 * (1 + std::abs(want))) << i << ", " << j;
    }
}

// A convolution's weight gradient over few positions (2 images at 2x2: 8 reduce steps, resnet18's
// layer3 on 32x32 input at batch 2), grad_output read in place along the output channels
// (stored channels-last), takes a channel tile, not plain loops (3-6 ms a kernel). A linear
// layer over 8 input features, whose weight would be packed into panels of 8 steps, does not.
// Both match their direct sums.
TEST(Lowering, ShortConvolutionWeightGradientsTakeChannelTiles) {
  const int64_t N = 2, C = 64, OC = 96, H = 2, P = H + 2;
  std::vector<float> xv(static_cast<size_t>(N * C * P * P)), gv(static_cast<size_t>(N * H * H * OC));
  for (size_t i = 0; i < xv.size(); i++) xv[i] = float(int(i * 7 % 13) - 6) * 0.25f;
  for (size_t i = 0; i < gv.size(); i++) gv[i] = float(int(i * 5 % 11) - 5) * 0.125f;
  Tensor xp = from(xv, {N, C, P, P}), go = from(gv, {N, H, H, OC});
  const Shape full{OC, C, 3, 3, N, H, H};
  Tensor gw = xp.as_strided({1, C, 3, 3, N, H, H}, {0, P * P, P, 1, C * P * P, P, 1}, 0)
                  .expand(full)
                  .binary(Op::Mul, go.permute({3, 0, 1, 2}).reshape({OC, 1, 1, 1, N, H, H}).expand(full))
                  .reduce(ReduceOp::Sum, {4, 5, 6}, false);
  for (const CpuTarget& t : {kAvx512, kAvx2}) {
    CpuPlan plan = lower_cpu(only_kernel(gw), t);
    ASSERT_TRUE(plan.channel);
    EXPECT_TRUE(plan.channel->unit);
  }
  std::vector<double> got = to_doubles(gw);
  for (int64_t o = 0; o < OC; o++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t k = 0; k < 9; k++) {
        double want = 0;
        for (int64_t n = 0; n < N; n++)
          for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < H; x++)
              want += double(xv[size_t(((n * C + c) * P + y + k / 3) * P + x + k % 3)]) *
                      double(gv[size_t(((n * H + y) * H + x) * OC + o)]);
        ASSERT_NEAR(got[size_t((o * C + c) * 9 + k)], want, 1e-4) << o << " " << c << " " << k;
      }
  Tensor a = values({5, 8}), w = values({32, 8});
  Tensor::realize_all({a, w});
  Tensor y = a.reshape({5, 1, 8}).expand({5, 32, 8}).binary(Op::Mul, w.reshape({1, 32, 8}).expand({5, 32, 8}))
                 .reduce(ReduceOp::Sum, {2}, false);
  EXPECT_FALSE(lower_cpu(only_kernel(y), kAvx512).channel);
  expect_matmul(to_doubles(y), to_doubles(a), to_doubles(w), 5, 8, 32, true);
}
