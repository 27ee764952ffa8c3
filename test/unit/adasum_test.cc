// Adasum's pure steps (ops/adasum.h), without MPI: the halving plan, the dot
// products and norms, the coefficients and the scaled add, and all of them
// together over simulated ranks against the pairwise tree they must equal.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "../../ops/adasum.h"
#include "../../ops/cpu_kernels.h"

namespace kolo::adasum {
namespace {

int64_t Total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0L); }

TEST(AdasumHalving, SplitsTheWholePartInTheMiddleTensorByTensor) {
  // 7 elements: the left rank keeps the first 3, the right rank the last 4.
  Halving left = Halve({3, 4}, true), right = Halve({3, 4}, false);
  EXPECT_EQ(left.kept, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(left.given, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(right.kept, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(right.given, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(left.kept_offset(), 0);
  EXPECT_EQ(left.given_offset(), 3);
  EXPECT_EQ(right.kept_offset(), 3);
  EXPECT_EQ(right.given_offset(), 0);
  // A tensor cut in two; empty tensors stay empty.
  Halving cut = Halve({0, 5, 0, 2}, true);
  EXPECT_EQ(cut.kept, (std::vector<int64_t>{0, 3, 0, 0}));
  EXPECT_EQ(cut.given, (std::vector<int64_t>{0, 2, 0, 2}));
  // One element: the left rank keeps nothing.
  EXPECT_EQ(Halve({1}, true).kept_total, 0);
  EXPECT_EQ(Halve({1}, false).kept_total, 1);
}

TEST(AdasumHalving, EveryRanksLastSliceTilesTheBufferOnce) {
  const std::vector<std::vector<int64_t>> cases = {
      {1}, {2}, {3}, {7}, {0, 0}, {5, 0, 9, 1}, {1, 1, 1}, {1000, 3, 17}, {0, 1}};
  for (int size : {1, 2, 4, 8, 16}) {
    for (const std::vector<int64_t>& counts : cases) {
      const int64_t total = Total(counts);
      std::vector<int> owner(static_cast<size_t>(total), -1);
      std::vector<int64_t> per_tensor(counts.size(), 0);
      for (int rank = 0; rank < size; ++rank) {
        const std::vector<Halving> plan = Plan(counts, rank, size);
        ASSERT_EQ(plan.size(), static_cast<size_t>(std::log2(size)));
        int64_t offset = 0;
        std::vector<int64_t> part = counts;
        for (const Halving& h : plan) {
          ASSERT_EQ(h.kept_total + h.given_total, Total(part));
          offset += h.kept_offset();
          part = h.kept;
        }
        for (int64_t i = offset; i < offset + Total(part); ++i) {
          ASSERT_EQ(owner[i], -1) << "size " << size << " element " << i << " held twice";
          owner[i] = rank;
        }
        for (size_t t = 0; t < part.size(); ++t) per_tensor[t] += part[t];
      }
      for (int64_t i = 0; i < total; ++i) {
        ASSERT_NE(owner[i], -1) << "size " << size << " element " << i << " held by nobody";
      }
      EXPECT_EQ(per_tensor, counts) << "size " << size;
    }
  }
}

TEST(AdasumNumerics, OrthogonalVectorsAddParallelOnesAverageZeroOnesChangeNothing) {
  Coefficients orthogonal = Combine(0.0, 4.0, 9.0);
  EXPECT_EQ(orthogonal.a, 1.0);
  EXPECT_EQ(orthogonal.b, 1.0);
  // a = 2v, b = 4v with |v| = 1: a.b = 8, |a|^2 = 4, |b|^2 = 16 -> 0 * a + 0.75 * b = 3v.
  Coefficients parallel = Combine(8.0, 4.0, 16.0);
  EXPECT_EQ(parallel.a, 0.0);
  EXPECT_EQ(parallel.b, 0.75);
  Coefficients zero = Combine(0.0, 0.0, 4.0);
  EXPECT_EQ(zero.a, 1.0);
  EXPECT_EQ(zero.b, 1.0);
  // Below sqrt(DBL_MIN) a norm counts as zero (Horovod's cut-off).
  EXPECT_EQ(Combine(1e-160, 1e-160, 1.0).a, 1.0);
}

TEST(AdasumNumerics, DotAndNormsInEveryDtypeInDouble) {
  const std::vector<double> a = {1, -2, 3, 0.5, 4, -1, 2}, b = {2, 2, -1, 4, 0.25, 3, -2};
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  std::vector<uint16_t> ah, bh;
  for (size_t i = 0; i < a.size(); ++i) {
    ah.push_back(FloatToHalf(static_cast<float>(a[i])));
    bh.push_back(FloatToHalf(static_cast<float>(b[i])));
  }
  const int64_t n = static_cast<int64_t>(a.size());
  for (const DotAndNorms& d : {ComputeDotAndNorms(a.data(), b.data(), n, DataType::kFloat64),
                               ComputeDotAndNorms(af.data(), bf.data(), n, DataType::kFloat32),
                               ComputeDotAndNorms(ah.data(), bh.data(), n, DataType::kFloat16)}) {
    EXPECT_EQ(d.dot, dot);  // small values: exact in every order
    EXPECT_EQ(d.a_squared, aa);
    EXPECT_EQ(d.b_squared, bb);
  }
  EXPECT_EQ(ComputeDotAndNorms(a.data(), b.data(), 0, DataType::kFloat64).dot, 0.0);
}

TEST(AdasumNumerics, ScaledAddInEveryDtype) {
  std::vector<double> a = {1, 2, 3}, b = {4, 5, 6};
  ScaledAdd(a.data(), 0.5, b.data(), 2.0, 3, DataType::kFloat64);
  EXPECT_EQ(a, (std::vector<double>{8.5, 11, 13.5}));
  std::vector<float> af = {1, 2, 3}, bf = {4, 5, 6};
  ScaledAdd(af.data(), 0.5, bf.data(), 2.0, 3, DataType::kFloat32);
  EXPECT_EQ(af, (std::vector<float>{8.5f, 11.0f, 13.5f}));
  std::vector<uint16_t> ah, bh;
  for (float x : {1.0f, 2.0f, 3.0f}) ah.push_back(FloatToHalf(x));
  for (float x : {4.0f, 5.0f, 6.0f}) bh.push_back(FloatToHalf(x));
  ScaledAdd(ah.data(), 0.5, bh.data(), 2.0, 3, DataType::kFloat16);
  EXPECT_EQ(HalfToFloat(ah[0]), 8.5f);
  EXPECT_EQ(HalfToFloat(ah[2]), 13.5f);
}

// The combination as a tree over ranks, tensor by tensor, in double.
std::vector<double> Tree(const std::vector<std::vector<double>>& ranks, size_t lo, size_t hi,
                         const std::vector<int64_t>& counts) {
  if (hi - lo == 1) return ranks[lo];
  const size_t mid = (lo + hi) / 2;
  std::vector<double> a = Tree(ranks, lo, mid, counts), b = Tree(ranks, mid, hi, counts);
  int64_t off = 0;
  for (int64_t c : counts) {
    DotAndNorms d = ComputeDotAndNorms(a.data() + off, b.data() + off, c, DataType::kFloat64);
    Coefficients k = Combine(d.dot, d.a_squared, d.b_squared);
    ScaledAdd(a.data() + off, k.a, b.data() + off, k.b, c, DataType::kFloat64);
    off += c;
  }
  return a;
}

// What adasum::Allreduce does, with the ranks simulated in one process:
// the same plan, per level the partner's copy of the kept half, the dot
// products and norms summed over the group, the same coefficients.
std::vector<double> Simulated(std::vector<std::vector<double>> data,
                              const std::vector<int64_t>& counts) {
  const int n = static_cast<int>(data.size());
  std::vector<std::vector<Halving>> plans;
  for (int r = 0; r < n; ++r) plans.push_back(Plan(counts, r, n));
  std::vector<int64_t> start(n, 0);
  for (size_t level = 0, d = 1; level < plans[0].size(); ++level, d <<= 1) {
    const std::vector<std::vector<double>> before = data;
    std::vector<std::vector<double>> partial(n);
    for (int r = 0; r < n; ++r) {
      const Halving& h = plans[r][level];
      start[r] += h.kept_offset();
      int64_t off = start[r];
      for (int64_t k : h.kept) {
        DotAndNorms dn = ComputeDotAndNorms(before[r].data() + off, before[r ^ d].data() + off, k,
                                            DataType::kFloat64);
        partial[r].insert(partial[r].end(), {dn.dot, h.left ? dn.a_squared : dn.b_squared,
                                             h.left ? dn.b_squared : dn.a_squared});
        off += k;
      }
    }
    for (int r = 0; r < n; ++r) {
      const Halving& h = plans[r][level];
      std::vector<double> sums(partial[r].size(), 0.0);
      for (int q = 0; q < n; ++q) {
        if (q / static_cast<int>(2 * d) != r / static_cast<int>(2 * d)) continue;
        for (size_t i = 0; i < sums.size(); ++i) sums[i] += partial[q][i];
      }
      int64_t off = start[r];
      for (size_t t = 0; t < h.kept.size(); ++t) {
        const double left = sums[3 * t + 1], right = sums[3 * t + 2];
        Coefficients k = Combine(sums[3 * t], h.left ? left : right, h.left ? right : left);
        ScaledAdd(data[r].data() + off, k.a, before[r ^ d].data() + off, k.b, h.kept[t],
                  DataType::kFloat64);
        off += h.kept[t];
      }
    }
  }
  std::vector<double> out(data[0].size());
  for (int r = 0; r < n; ++r) {
    const int64_t kept = plans[r].empty() ? Total(counts) : plans[r].back().kept_total;
    std::copy(data[r].data() + start[r], data[r].data() + start[r] + kept, out.data() + start[r]);
  }
  return out;
}

TEST(AdasumNumerics, SimulatedRanksEqualThePairwiseTreeTensorByTensor) {
  std::mt19937 gen(11);
  std::normal_distribution<double> normal;
  for (int n : {1, 2, 4, 8}) {
    for (const std::vector<int64_t>& counts :
         std::vector<std::vector<int64_t>>{{9}, {5, 1, 0, 9}, {1}, {3, 2}, {2, 0}}) {
      std::vector<std::vector<double>> ranks(n, std::vector<double>(Total(counts)));
      for (auto& v : ranks) {
        for (double& x : v) x = normal(gen);
      }
      const std::vector<double> want = Tree(ranks, 0, n, counts);
      const std::vector<double> got = Simulated(ranks, counts);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i])))
            << "ranks " << n << " element " << i;
      }
    }
  }
}

TEST(AdasumNumerics, SupportsTheThreeFloatTypesOnPowersOfTwo) {
  EXPECT_TRUE(Supports(DataType::kFloat16));
  EXPECT_TRUE(Supports(DataType::kFloat32));
  EXPECT_TRUE(Supports(DataType::kFloat64));
  EXPECT_FALSE(Supports(DataType::kBFloat16));
  EXPECT_FALSE(Supports(DataType::kInt32));
  for (int64_t n : {1, 2, 4, 64}) EXPECT_TRUE(IsPowerOfTwo(n)) << n;
  for (int64_t n : {0, 3, 6, 12, -4}) EXPECT_FALSE(IsPowerOfTwo(n)) << n;
}

}  // namespace
}  // namespace kolo::adasum
