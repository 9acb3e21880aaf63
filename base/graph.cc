// SPDX-License-Identifier: Apache-2.0
#include "base/graph.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace maestro {

std::vector<int> TopologicalOrder(int n, const DirectedEdges& edges) {
  std::vector<int> indegree(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  for (const auto& [from, to] : edges) {
    ++indegree[static_cast<size_t>(to)];
    out[static_cast<size_t>(from)].push_back(to);
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int v = 0; v < n; ++v) {
    if (indegree[static_cast<size_t>(v)] == 0) ready.push(v);
  }
  std::vector<int> order;
  order.reserve(static_cast<size_t>(n));
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : out[static_cast<size_t>(v)]) {
      if (--indegree[static_cast<size_t>(w)] == 0) ready.push(w);
    }
  }
  return order;
}

GraphCycle FindCycle(int n, const DirectedEdges& edges) {
  std::vector<std::vector<int>> out(static_cast<size_t>(n));  // edge indices leaving each vertex
  for (size_t e = 0; e < edges.size(); ++e) out[static_cast<size_t>(edges[e].first)].push_back(static_cast<int>(e));
  enum State : char { kNew, kOnStack, kDone };
  std::vector<State> state(static_cast<size_t>(n), kNew);
  std::vector<int> stack;
  GraphCycle cycle;
  std::function<void(int)> visit = [&](int v) {
    state[static_cast<size_t>(v)] = kOnStack;
    stack.push_back(v);
    for (int e : out[static_cast<size_t>(v)]) {
      if (cycle.found()) break;
      const int w = edges[static_cast<size_t>(e)].second;
      if (state[static_cast<size_t>(w)] == kOnStack) {
        cycle.vertices.assign(std::find(stack.begin(), stack.end(), w), stack.end());
        cycle.closing_edge = e;
      } else if (state[static_cast<size_t>(w)] == kNew) {
        visit(w);
      }
    }
    stack.pop_back();
    state[static_cast<size_t>(v)] = kDone;
  };
  for (int v = 0; v < n && !cycle.found(); ++v) {
    if (state[static_cast<size_t>(v)] == kNew) visit(v);
  }
  return cycle;
}

}  // namespace maestro
