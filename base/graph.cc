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
  // The depth-first path with, per vertex, the next of its out-edges to
  // follow: an explicit stack, so a chain of any length needs no call stack.
  struct Frame {
    int vertex;
    size_t next_edge;
  };
  std::vector<Frame> path;
  GraphCycle cycle;
  for (int root = 0; root < n && !cycle.found(); ++root) {
    if (state[static_cast<size_t>(root)] != kNew) continue;
    state[static_cast<size_t>(root)] = kOnStack;
    path.push_back({root, 0});
    while (!path.empty() && !cycle.found()) {
      Frame& top = path.back();
      const std::vector<int>& leaving = out[static_cast<size_t>(top.vertex)];
      if (top.next_edge == leaving.size()) {
        state[static_cast<size_t>(top.vertex)] = kDone;
        path.pop_back();
        continue;
      }
      const int e = leaving[top.next_edge++];
      const int w = edges[static_cast<size_t>(e)].second;
      if (state[static_cast<size_t>(w)] == kOnStack) {
        auto on_path = std::find_if(path.begin(), path.end(), [w](const Frame& f) { return f.vertex == w; });
        for (; on_path != path.end(); ++on_path) cycle.vertices.push_back(on_path->vertex);
        cycle.closing_edge = e;
      } else if (state[static_cast<size_t>(w)] == kNew) {
        state[static_cast<size_t>(w)] = kOnStack;
        path.push_back({w, 0});  // `top` is not used after this
      }
    }
  }
  return cycle;
}

}  // namespace maestro
