// Real c10d Gloo process groups for unit tests: W ranks run as threads of the test, each with its
// own TCPStore client and ProcessGroupGloo over loopback, exactly as separate processes would.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/listen_port.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

// Runs body(comm) on `world` ranks (threads), each owning its communicator, and waits for all.
inline void RunRankComms(int world, const std::function<void(std::unique_ptr<Communicator>)>& body) {
  int port = PickFreeLoopbackPort();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RendezvousOptions o;
      o.rank = r;
      o.world = world;
      o.master_port = port;
      o.timeout = std::chrono::seconds(60);
      auto comm = CreateCpuCommunicator(o);
      if (!comm.ok()) {
        errors[r] = comm.status().ToString();
        return;
      }
      try {
        body(std::move(*comm));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
}

// Runs body(comm) on `world` ranks (threads) and waits for all of them.
inline void RunRanks(int world, const std::function<void(Communicator&)>& body) {
  RunRankComms(world, [&](std::unique_ptr<Communicator> comm) { body(*comm); });
}

}  // namespace eft::trainer
