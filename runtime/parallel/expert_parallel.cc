// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/expert_parallel.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/collectives.h"
#include "runtime/tensor_buffer.h"

namespace maestro::runtime {

namespace {

void ThrowIfFailed(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

// The rows on the wire: bf16 rows stay bf16 (autocast: what the cost model
// prices), anything else travels as fp32.
torch::Tensor WireRows(const torch::Tensor& rows) {
  return rows.scalar_type() == torch::kBFloat16 ? rows.contiguous() : rows.to(torch::kFloat32).contiguous();
}

struct AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& rows, int64_t ep) {
    ctx->saved_data["ep"] = ep;
    auto* exchange = reinterpret_cast<ExpertParallelExchange*>(ep);
    return exchange->AllToAllRows(WireRows(rows)).to(rows.scalar_type());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* exchange = reinterpret_cast<ExpertParallelExchange*>(ctx->saved_data["ep"].toInt());
    // The transpose of "block j to rank j" is the same exchange.
    auto g = exchange->AllToAllRows(WireRows(grads[0]));
    return {g.to(grads[0].scalar_type()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor GroupExpertExchange::AllGatherCounts(const torch::Tensor& counts) {
  auto in = OnBackendDevice(counts, group_.device());
  auto out = torch::empty({size() * in.numel()}, in.options());
  ThrowIfFailed(Wait(group_.AllGather(FloatBuffer(in), FloatBuffer(out))));
  return out.to(torch::kCPU).view({size(), counts.numel()});
}

torch::Tensor GroupExpertExchange::AllToAllRows(const torch::Tensor& rows) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) % size() == 0, "EP all-to-all: rows must be (G*P, C), got ",
              rows.sizes());
  const bool bf16 = rows.scalar_type() == torch::kBFloat16;
  TORCH_CHECK(bf16 || rows.scalar_type() == torch::kFloat32, "EP all-to-all: rows must be fp32 or bf16");
  const bool on_gpu = group_.device() == launcher::Device::kCuda;
  auto in = (on_gpu ? rows.to(rows.is_cuda() ? rows.device() : torch::Device(torch::kCUDA)) : rows.to(torch::kCPU))
                .contiguous();
  auto out = torch::empty_like(in);
  const auto buffer = [&](const torch::Tensor& t) {
    return launcher::Buffer{t.data_ptr(), static_cast<size_t>(t.numel()),
                            bf16 ? launcher::DType::kBF16 : launcher::DType::kF32,
                            t.is_cuda() ? launcher::Device::kCuda : launcher::Device::kCpu};
  };
  ThrowIfFailed(Wait(group_.AllToAll(buffer(in), buffer(out))));
  return out.to(rows.device());
}

void GroupExpertExchange::AllReduceSum(torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat32, "EP all-reduce needs contiguous fp32");
  auto wire = OnBackendDevice(t, group_.device());
  ThrowIfFailed(Wait(group_.AllReduce(FloatBuffer(wire), launcher::ReduceOp::kSum)));
  CopyBackFromBackend(t, wire);
}

torch::Tensor ExpertAllToAll(const torch::Tensor& rows, ExpertParallelExchange* ep) {
  return AllToAllFunction::apply(rows, reinterpret_cast<int64_t>(ep));
}

torch::Tensor RunExpertsParallel(const torch::Tensor& tokens, const std::vector<torch::Tensor>& token_of_expert,
                                 const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& expert,
                                 ExpertParallelExchange* ep) {
  const int64_t g = ep->size(), me = ep->rank();
  const int64_t num_experts = static_cast<int64_t>(token_of_expert.size());
  TORCH_CHECK(num_experts % g == 0, "EP: ", num_experts, " experts are not divisible by the EP size ", g);
  const int64_t local = num_experts / g, n = tokens.size(0), c = tokens.size(1);
  // 1. Every rank's slot count per expert: (G, E).
  std::vector<float> mine(static_cast<size_t>(num_experts));
  for (int64_t e = 0; e < num_experts; ++e) mine[static_cast<size_t>(e)] = token_of_expert[e].size(0);
  auto counts = ep->AllGatherCounts(torch::tensor(mine, torch::kFloat32).to(tokens.device()));
  auto count = counts.to(torch::kInt64).contiguous();  // (G, E)
  const int64_t* at = count.data_ptr<int64_t>();
  int64_t block = 0;  // P: the most rows one rank sends another
  for (int64_t i = 0; i < g; ++i) {
    for (int64_t j = 0; j < g; ++j) {
      int64_t rows = 0;
      for (int64_t l = 0; l < local; ++l) rows += at[i * num_experts + j * local + l];
      block = std::max(block, rows);
    }
  }
  // 2. Dispatch: slot rows to their expert's rank, expert by expert inside a
  // block; padding rows read the extra zero row N.
  const auto long_options = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<int64_t> source(static_cast<size_t>(g * block), n), place;
  for (int64_t j = 0; j < g; ++j) {
    int64_t row = j * block;
    for (int64_t l = 0; l < local; ++l) {
      const auto& ids = token_of_expert[static_cast<size_t>(j * local + l)];
      auto ids_cpu = ids.to(torch::kCPU, torch::kInt64).contiguous();
      const int64_t* id = ids_cpu.data_ptr<int64_t>();
      for (int64_t k = 0; k < ids_cpu.numel(); ++k, ++row) {
        source[static_cast<size_t>(row)] = id[k];
        place.push_back(row);
      }
    }
  }
  // `place` is in expert order already: experts are contiguous per rank.
  auto padded = torch::cat({tokens, torch::zeros({1, c}, tokens.options())}, 0);                // (N + 1, C)
  auto send = padded.index_select(0, torch::tensor(source, long_options).to(tokens.device()));  // (G*P, C)
  auto received = ExpertAllToAll(send, ep);                                                     // (G*P, C)
  // 3. This rank's experts on what every rank sent them: block i's rows of
  // local expert l follow those of l - 1.
  std::vector<int64_t> offset(static_cast<size_t>(g), 0);
  std::vector<torch::Tensor> outputs, positions;
  for (int64_t l = 0; l < local; ++l) {
    const int64_t e = me * local + l;
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < g; ++i) {
      const int64_t m = at[i * num_experts + e];
      for (int64_t k = 0; k < m; ++k) rows.push_back(i * block + offset[static_cast<size_t>(i)] + k);
      offset[static_cast<size_t>(i)] += m;
    }
    if (rows.empty()) continue;
    auto index = torch::tensor(rows, long_options).to(tokens.device());
    outputs.push_back(expert(e, received.index_select(0, index)));  // (M, C)
    positions.push_back(index);
  }
  // received * 0, not zeros: the combine's backward must reach the
  // dispatch's on every rank, also one whose experts got no row.
  auto results = received * 0.0;  // (G*P, C)
  if (!outputs.empty()) results = results.index_add(0, torch::cat(positions), torch::cat(outputs).to(results.dtype()));
  // 4. Combine: the results back to where the rows came from.
  auto returned = ExpertAllToAll(results, ep);                                              // (G*P, C)
  return returned.index_select(0, torch::tensor(place, long_options).to(tokens.device()));  // (S, C)
}

}  // namespace maestro::runtime
