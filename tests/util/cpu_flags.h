// The CPU features the kernel enabled, as /proc/cpuinfo's first "flags" line lists them (XSAVE state
// included): the independent view tests hold cpuid-based detection against.
#pragma once

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace eft::testing {

// Empty when /proc/cpuinfo cannot be read or has no flags line.
inline std::set<std::string> KernelCpuFlags() {
  std::set<std::string> flags;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

}  // namespace eft::testing
