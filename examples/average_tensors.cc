// Data-parallel training of a linear regression model in plain C++ with kolo:
// every rank computes gradients on its own shard of synthetic data, kolo
// averages them (fused, one collective per step), every rank applies the same
// update. At the end the ranks check that their weights are identical.
//
//   mpirun -np 2 build/examples/average_tensors
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kolo/runtime.h"

namespace {

constexpr int kFeatures = 16;
constexpr int kSamplesPerRank = 512;
constexpr int kSteps = 200;

int Fail(const char* what, const kolo::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  auto created = kolo::Runtime::Create({});
  if (!created.ok()) return Fail("kolo init", created.status());
  kolo::Runtime& rt = *created.value();
  const int rank = rt.rank(), size = rt.size();

  // The true model every rank's data comes from; each rank draws its own shard.
  std::vector<float> true_w(kFeatures);
  for (int j = 0; j < kFeatures; ++j) true_w[j] = 0.5f * static_cast<float>(j % 5) - 1.0f;
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> x(kSamplesPerRank * kFeatures), y(kSamplesPerRank);
  for (int i = 0; i < kSamplesPerRank; ++i) {
    float t = 0.3f;
    for (int j = 0; j < kFeatures; ++j) {
      x[i * kFeatures + j] = noise(gen) * 20.0f;
      t += true_w[j] * x[i * kFeatures + j];
    }
    y[i] = t + noise(gen);
  }

  // Different initial weights on every rank, then rank 0's are broadcast.
  std::vector<float> w(kFeatures, static_cast<float>(rank)), b(1, static_cast<float>(rank));
  kolo::CollectiveOptions bopts;
  bopts.name = "init.w";
  auto hw = rt.EnqueueBroadcast({w.data(), kolo::DataType::kFloat32, {kFeatures}}, 0, bopts);
  bopts.name = "init.b";
  auto hb = rt.EnqueueBroadcast({b.data(), kolo::DataType::kFloat32, {1}}, 0, bopts);
  if (!hw.ok() || !hb.ok()) return Fail("broadcast", hw.ok() ? hb.status() : hw.status());
  kolo::Status s = rt.Wait(hw.value());
  if (s.ok()) s = rt.Wait(hb.value());
  if (!s.ok()) return Fail("broadcast", s);

  std::vector<float> gw(kFeatures), gb(1), loss(1);
  const float lr = 0.05f;
  for (int step = 0; step < kSteps; ++step) {
    std::fill(gw.begin(), gw.end(), 0.0f);
    gb[0] = 0.0f;
    loss[0] = 0.0f;
    for (int i = 0; i < kSamplesPerRank; ++i) {
      float pred = b[0];
      for (int j = 0; j < kFeatures; ++j) pred += w[j] * x[i * kFeatures + j];
      float err = pred - y[i];
      loss[0] += err * err / kSamplesPerRank;
      for (int j = 0; j < kFeatures; ++j) gw[j] += 2 * err * x[i * kFeatures + j] / kSamplesPerRank;
      gb[0] += 2 * err / kSamplesPerRank;
    }
    // Three named tensors, averaged across ranks (kolo fuses them).
    kolo::AllreduceOptions opts;
    std::vector<kolo::Handle> handles;
    for (auto* t : {&gw, &gb, &loss}) {
      opts.name = t == &gw ? "grad.w" : t == &gb ? "grad.b" : "loss";
      kolo::TensorView v{t->data(), kolo::DataType::kFloat32, {static_cast<int64_t>(t->size())}};
      auto h = rt.EnqueueAllreduce(v, v, opts);
      if (!h.ok()) return Fail("allreduce", h.status());
      handles.push_back(h.value());
    }
    for (kolo::Handle h : handles) {
      s = rt.Wait(h);
      if (!s.ok()) return Fail("allreduce", s);
    }
    for (int j = 0; j < kFeatures; ++j) w[j] -= lr * gw[j];
    b[0] -= lr * gb[0];
    if (rank == 0 && (step % 50 == 0 || step == kSteps - 1)) {
      std::printf("step %3d  mean loss over %d ranks: %.5f\n", step, size, loss[0]);
    }
  }

  // Every rank must hold the same weights: gather them and compare.
  auto hg = rt.EnqueueAllgather({w.data(), kolo::DataType::kFloat32, {1, kFeatures}}, {});
  if (!hg.ok()) return Fail("allgather", hg.status());
  kolo::WorkResult all;
  s = rt.Wait(hg.value(), &all);
  if (!s.ok()) return Fail("allgather", s);
  const float* gathered = reinterpret_cast<const float*>(all.data.data());
  float max_diff = 0, max_err = 0;
  for (int r = 0; r < size; ++r) {
    for (int j = 0; j < kFeatures; ++j) {
      max_diff = std::max(max_diff, std::fabs(gathered[r * kFeatures + j] - w[j]));
    }
  }
  for (int j = 0; j < kFeatures; ++j) max_err = std::max(max_err, std::fabs(w[j] - true_w[j]));
  if (rank == 0) {
    std::printf("ranks: %d, weights identical across ranks: %s (max difference %g)\n", size,
                max_diff == 0 ? "yes" : "NO", max_diff);
    std::printf("max |w - true_w| = %.4f\n", max_err);
  }
  s = rt.Shutdown();
  if (!s.ok()) return Fail("shutdown", s);
  return (max_diff == 0 && max_err < 0.05f) ? 0 : 2;
}
