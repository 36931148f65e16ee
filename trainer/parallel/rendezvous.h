// The c10d store every backend's process group meets in: a TCPStore at master_addr:master_port,
// hosted by rank 0. Internal to trainer/parallel (it exposes c10d types).
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainer/parallel/communicator.h"

namespace eft::trainer::internal {

// Throws what c10d throws (the callers turn it into a Status naming the rendezvous).
c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& options);
Status RendezvousFailed(const RendezvousOptions& options, const std::exception& e);

}  // namespace eft::trainer::internal
