#include "trainer/runtime/host_allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "common/sanitizers.h"

extern char** environ;

namespace eft::trainer {
namespace {

bool UserChoseMallocSettings() {
  if (const char* d = std::getenv("EFT_MALLOC_DEFAULTS"); d != nullptr && std::strcmp(d, "1") == 0) return true;
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t != nullptr && std::strstr(t, "glibc.malloc.") != nullptr) {
    return true;
  }
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "MALLOC_", 7) == 0) return true;
  }
  return false;
}

}  // namespace

Status ConfigureHostAllocator() {
  // A sanitizer's runtime has its own allocator, which mallopt does not reach.
  if (UserChoseMallocSettings() || kUnderSanitizer) return Status::Ok();
  constexpr int kMmapThreshold = 32 << 20;  // glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
  constexpr int kTrimThreshold = 1 << 30;
  if (::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 || ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    return Status::Internal("glibc malloc refused the mmap/trim thresholds: freed memory goes back to the kernel");
  }
  // Blocks above the threshold would still be mmapped and unmapped on every allocation: the
  // vocabulary-sized gradients and gathered embeddings of every step. Without mmap, the main
  // arena's heap serves them and keeps them (other threads' arenas still fall back to mmap when
  // their 64 MiB heaps cannot hold a block, so no allocation fails for this).
  if (::mallopt(M_MMAP_MAX, 0) != 1) {
    return Status::Internal("glibc malloc refused M_MMAP_MAX 0: blocks above 32 MiB go back to the kernel");
  }
  return Status::Ok();
}

}  // namespace eft::trainer
