// The c10d store every backend's process group meets in: a TCPStore at master_addr:master_port,
// hosted by rank 0. Internal to trainer/parallel (it exposes c10d types).
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainer/parallel/communicator.h"

namespace eft::trainer::internal {

// Throws what c10d throws (the callers turn it into a Status naming the rendezvous).
c10::intrusive_ptr<c10d::Store> ConnectStore(const RendezvousOptions& options);
Status RendezvousFailed(const RendezvousOptions& options, const std::exception& e);

// Call before creating a process group. c10d's flight recorder (a ring buffer of every collective,
// with a traceback each, shared by all process groups of the process) is turned off unless the user
// asked for it (TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE set): eft never dumps it, it
// costs a traceback capture per collective, and under PyTorch 2.11 two process groups recording
// their first collectives from two threads at once race on its unguarded map of groups and can spin
// forever (seen with ranks as threads in tests; docs/architecture.md, "Communicators").
void DisableFlightRecorderUnlessAsked();

}  // namespace eft::trainer::internal
