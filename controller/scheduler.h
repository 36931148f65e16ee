// Gang placement: picks the nodes an attempt runs on, or says why it cannot start yet.
//
// A job needs at least `min_nodes` nodes that are READY, not drained and have `slots_per_node` free
// slots; it takes up to `max_nodes` of them. Node order is stable so rank 0 stays put across
// attempts when it can: nodes of the previous attempt first (in their old order), then the rest by
// name. Pure function of its inputs, so it is tested without a controller.
#pragma once

#include <string>
#include <vector>

namespace eft::controller {

struct NodeCapacity {
  std::string name;
  bool ready = false;
  bool drained = false;
  // Non-empty: held for that waiting job (priority_policy.h), so not this one's to take.
  std::string reserved_for;
  // Slot indices (0..slots-1) not used by any rank the controller wants or a worker still runs.
  std::vector<int> free_slots;
};

struct PlacementRequest {
  int min_nodes = 1;
  int max_nodes = 1;
  int slots_per_node = 1;
  std::vector<std::string> previous_nodes;  // of the job's last attempt, in rank order
};

struct Placement {
  bool placed = false;
  std::vector<std::string> nodes;        // rank order
  std::vector<std::vector<int>> slots;   // per node, the slot of local rank 0, 1, ...
  // When !placed: "needs 2 nodes with 4 free slots, 1 available (n2: 2 free slots, n3: drained)".
  std::string why_not;
};

Placement PlaceGang(const PlacementRequest& request, const std::vector<NodeCapacity>& nodes);

}  // namespace eft::controller
