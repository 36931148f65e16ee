#include "controller/scheduler.h"

#include <algorithm>
#include <sstream>

namespace eft::controller {

Placement PlaceGang(const PlacementRequest& request, const std::vector<NodeCapacity>& nodes) {
  std::vector<const NodeCapacity*> fits;
  std::vector<std::string> unfit;  // short reasons for the message
  for (const auto& n : nodes) {
    if (!n.ready) {
      unfit.push_back(n.name + ": lost");
    } else if (n.drained) {
      unfit.push_back(n.name + ": drained");
    } else if (!n.reserved_for.empty()) {
      unfit.push_back(n.name + ": reserved for job " + n.reserved_for);
    } else if (static_cast<int>(n.free_slots.size()) < request.slots_per_node) {
      unfit.push_back(n.name + ": " + std::to_string(n.free_slots.size()) + " free slots");
    } else {
      fits.push_back(&n);
    }
  }

  auto previous_index = [&](const std::string& name) {
    auto it = std::find(request.previous_nodes.begin(), request.previous_nodes.end(), name);
    return it == request.previous_nodes.end() ? request.previous_nodes.size()
                                              : static_cast<size_t>(it - request.previous_nodes.begin());
  };
  std::sort(fits.begin(), fits.end(), [&](const NodeCapacity* a, const NodeCapacity* b) {
    size_t ia = previous_index(a->name), ib = previous_index(b->name);
    if (ia != ib) return ia < ib;
    return a->name < b->name;
  });

  Placement p;
  if (static_cast<int>(fits.size()) < request.min_nodes) {
    std::ostringstream why;
    why << "needs " << request.min_nodes << (request.min_nodes == 1 ? " node" : " nodes") << " with "
        << request.slots_per_node << (request.slots_per_node == 1 ? " free slot" : " free slots") << ", "
        << fits.size() << " available";
    if (nodes.empty()) why << " (no nodes registered)";
    if (!unfit.empty()) {
      why << " (";
      for (size_t i = 0; i < unfit.size() && i < 8; ++i) why << (i ? ", " : "") << unfit[i];
      if (unfit.size() > 8) why << ", ...";
      why << ")";
    }
    p.why_not = why.str();
    return p;
  }
  size_t take = std::min<size_t>(fits.size(), static_cast<size_t>(request.max_nodes));
  p.placed = true;
  for (size_t i = 0; i < take; ++i) {
    p.nodes.push_back(fits[i]->name);
    std::vector<int> slots(fits[i]->free_slots.begin(), fits[i]->free_slots.begin() + request.slots_per_node);
    p.slots.push_back(std::move(slots));
  }
  return p;
}

}  // namespace eft::controller
