// SPDX-License-Identifier: Apache-2.0
// Directed graphs of sections: the one topological order and the one cycle
// check every module uses (the spec's checks, plan::Validate, the scheduler,
// the runtime's reference).
//
// Owns: the order rule (Kahn's algorithm, the smallest ready vertex first, so
// the order is deterministic) and the cycle search (depth-first from vertex 0
// upwards, edges in their given order; the first back edge closes the cycle).
// Both walk with explicit stacks and queues, never recursion: a graph of any
// size (a chain of 60,000 vertices) runs in O(n + edges) time on the heap.
// May call: nothing beyond the standard library.
// Thread safety: pure functions.
#pragma once

#include <utility>
#include <vector>

namespace maestro {

// Edges as (from, to) vertex indices in [0, n).
using DirectedEdges = std::vector<std::pair<int, int>>;

// Every vertex in an order where each edge points forward; ties go to the
// smallest index. With a cycle the vertices on or after it are missing, so
// `order.size() < n` says the graph has one.
std::vector<int> TopologicalOrder(int n, const DirectedEdges& edges);

struct GraphCycle {
  std::vector<int> vertices;  // v0 -> v1 -> ... -> vk -> v0; empty when the graph is acyclic
  int closing_edge = -1;      // index into `edges` of vk -> v0
  bool found() const { return !vertices.empty(); }
};

// The first cycle a depth-first search meets (see above), or none.
GraphCycle FindCycle(int n, const DirectedEdges& edges);

}  // namespace maestro
