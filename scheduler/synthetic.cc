// SPDX-License-Identifier: Apache-2.0
#include "scheduler/synthetic.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "base/splitmix.h"

namespace maestro::scheduler {
namespace {

// SplitMix64: the same numbers on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * kSplitMixGamma + 0x632be59bd9b4e019ULL) {}
  uint64_t Next() { return SplitMix64Next(state_); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  int64_t Int(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  template <typename T>
  T Pick(std::initializer_list<T> items) {
    return *(items.begin() + Int(0, static_cast<int64_t>(items.size()) - 1));
  }

 private:
  uint64_t state_;
};

// The DP degree of a section that must pair with `neighbour_dp` on an edge
// (ratio at most max_fanout either way) closest above `wanted`.
int PairedDp(int neighbour_dp, int max_fanout, double wanted) {
  std::vector<int> feasible;
  for (int k = 1; k <= max_fanout; ++k) {
    if (neighbour_dp % k == 0) feasible.push_back(neighbour_dp / k);
    feasible.push_back(neighbour_dp * k);
  }
  std::sort(feasible.begin(), feasible.end());
  for (int dp : feasible) {
    if (dp >= wanted * 0.999) return dp;
  }
  return feasible.back();
}

// The means of the realistic distributions below: log-normal(median 512,
// sigma 1) has mean 512·e^0.5 ≈ 844; log-uniform on [64, 2304] has mean
// (2304 − 64) / ln 36 ≈ 625; uniform 200..800 has mean 500.
constexpr int64_t kMeanTextTokens = 844;
constexpr int64_t kMeanImageTokens = 625;
constexpr int64_t kMeanAudioTokens = 500;

}  // namespace

Problem MakeSyntheticPlan(const SyntheticPlanOptions& opt) {
  Rng rng(opt.seed);
  const int S = std::clamp(opt.sections, 2, 6);
  const int maxf = std::clamp(opt.max_fanout, 1, 4);
  Problem p;
  p.modality_names = {"image", "audio"};
  auto jitter = [&] { return 0.7 + 0.6 * rng.Uniform(); };
  struct Def {
    SectionSpec spec;
    LinearCostModel::SectionCost cost;
    double work_per_sample = 0;  // expected fwd+bwd seconds, design mix
  };
  std::vector<Def> defs;
  const double text_avg = 844, image_avg = 625, audio_avg = 500;
  const double image_design = 0.5, audio_design = 0.25;
  auto add = [&](const std::string& name, int modality, bool trains, double per_token, int mb) {
    Def d;
    d.spec.name = name;
    d.spec.modality = modality;
    d.spec.trains = trains;
    d.spec.micro_batch = mb;
    d.cost.seconds_per_token = per_token * jitter();
    d.cost.fixed_seconds = 1e-3 * jitter();
    d.cost.backward_factor = 2.0;
    d.cost.optimizer_seconds = trains ? 5e-3 * jitter() : 0.0;
    double tokens = 0, share = 1;
    if (modality == 0) {
      tokens = image_avg;
      share = image_design;
    } else if (modality == 1) {
      tokens = audio_avg;
      share = audio_design;
    } else {
      tokens = text_avg + image_design * image_avg + audio_design * audio_avg;
    }
    d.work_per_sample = share * tokens * d.cost.seconds_per_token * (trains ? 3.0 : 1.0);
    defs.push_back(std::move(d));
    return static_cast<int>(defs.size()) - 1;
  };
  auto mode = [&](double p_train) { return !opt.random_modes || rng.Uniform() < p_train; };
  // Section order is topological: producers first, the LLM last. A producer
  // trains only if its consumer does (forward-only sections pass no gradient).
  const bool proj_trains = mode(0.8);
  const bool audio_proj_trains = mode(0.8);
  const bool vit_trains = mode(0.7) && (S < 3 || proj_trains);
  const bool audio_trains = mode(0.5) && (S < 6 || audio_proj_trains);
  const int vit = add("vit", 0, vit_trains, 3e-5, rng.Pick({2, 4, 8}));
  int proj = -1, audio = -1, teacher = -1, audio_proj = -1;
  if (S >= 3) proj = add("projector", 0, proj_trains, 4e-6, rng.Pick({4, 8}));
  if (S >= 4) audio = add("audio", 1, audio_trains, 2.5e-5, rng.Pick({4, 8}));
  if (S >= 5) teacher = add("teacher", -1, false, 1.2e-5, rng.Pick({4, 8, 16}));
  if (S >= 6) audio_proj = add("audio_proj", 1, audio_proj_trains, 4e-6, rng.Pick({4, 8}));
  const int llm = add("llm", -1, true, 2e-5, rng.Pick({1, 2, 4}));
  defs[static_cast<size_t>(llm)].cost.seconds_per_token_sq = 2e-9 * jitter();
  std::vector<std::pair<int, int>> edges;
  if (proj >= 0) {
    edges.push_back({vit, proj});
    edges.push_back({proj, llm});
  } else {
    edges.push_back({vit, llm});
  }
  if (audio >= 0) {
    if (audio_proj >= 0) {
      edges.push_back({audio, audio_proj});
      edges.push_back({audio_proj, llm});
    } else {
      edges.push_back({audio, llm});
    }
  }
  if (teacher >= 0) edges.push_back({teacher, llm});
  // DP: the LLM first, then each producer sized to its expected load.
  const int D = rng.Pick({4, 8, 12});
  defs[static_cast<size_t>(llm)].spec.dp = D;
  const double llm_work = defs[static_cast<size_t>(llm)].work_per_sample;
  auto size_from = [&](int section, int neighbour) {
    const double wanted = D * defs[static_cast<size_t>(section)].work_per_sample / llm_work;
    defs[static_cast<size_t>(section)].spec.dp = PairedDp(defs[static_cast<size_t>(neighbour)].spec.dp, maxf, wanted);
  };
  if (proj >= 0) {
    size_from(proj, llm);
    size_from(vit, proj);
  } else {
    size_from(vit, llm);
  }
  if (audio >= 0) {
    if (audio_proj >= 0) {
      size_from(audio_proj, llm);
      size_from(audio, audio_proj);
    } else {
      size_from(audio, llm);
    }
  }
  if (teacher >= 0) size_from(teacher, llm);
  std::vector<LinearCostModel::SectionCost> costs;
  for (Def& d : defs) {
    p.sections.push_back(d.spec);
    costs.push_back(d.cost);
  }
  std::vector<LinearCostModel::EdgeCost> edge_costs;
  for (const auto& e : edges) {
    p.edges.push_back(EdgeSpec{e.first, e.second});
    LinearCostModel::EdgeCost c;
    c.seconds_per_sample = 2e-4 * jitter();
    c.seconds_per_token = 5e-7 * jitter();
    edge_costs.push_back(c);
  }
  p.costs = std::make_shared<LinearCostModel>(p.sections, costs, p.edges, edge_costs);
  return p;
}

std::vector<Sample> MakeSyntheticBatch(const Problem& plan, const SyntheticBatchOptions& opt) {
  Rng rng(opt.seed ^ 0x5eed5eed5eedULL);
  std::vector<Sample> out(static_cast<size_t>(std::max(opt.samples, 0)));
  const size_t run = static_cast<size_t>(std::max(opt.run_length, 1));
  bool run_image = false, run_audio = false;
  for (size_t i = 0; i < out.size(); ++i) {
    Sample& s = out[i];
    if (i % run == 0) {
      run_image = rng.Uniform() < opt.image_ratio;
      run_audio = rng.Uniform() < opt.audio_ratio;
    }
    const bool has_image = run == 1 ? rng.Uniform() < opt.image_ratio : run_image;
    const bool has_audio = run == 1 ? rng.Uniform() < opt.audio_ratio : run_audio;
    s.id = (static_cast<uint64_t>(opt.seed & 0xffffff) << 32) | static_cast<uint64_t>(i);
    // Text length: log-normal (median 512 tokens, sigma 1), 16..16384: most
    // samples short, a long tail, as in instruction and caption data.
    const double u1 = std::max(rng.Uniform(), 1e-12), u2 = rng.Uniform();
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    s.text_tokens = std::clamp<int64_t>(static_cast<int64_t>(512.0 * std::exp(z)), 16, 16384);
    if (opt.uniform_lengths) s.text_tokens = kMeanTextTokens;
    if (has_image && !plan.modality_names.empty()) {
      // Dynamic resolution: 64..2304 patch tokens per image, log-uniform.
      int images = 1;
      while (images < opt.max_images && rng.Uniform() < 0.5) ++images;
      s.modalities |= 1u;
      int64_t tokens = 0;
      for (int k = 0; k < images; ++k) {
        const int64_t t = static_cast<int64_t>(64.0 * std::exp(rng.Uniform() * std::log(36.0)));
        tokens += opt.uniform_lengths ? kMeanImageTokens : t;
      }
      s.modality_tokens[0] = tokens;
    }
    if (plan.modality_names.size() > 1 && has_audio) {
      s.modalities |= 2u;
      const int64_t t = rng.Int(200, 800);
      s.modality_tokens[1] = opt.uniform_lengths ? kMeanAudioTokens : t;
    }
  }
  return out;
}

}  // namespace maestro::scheduler
