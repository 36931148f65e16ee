// The host memory allocator's settings for eft-train. A training step allocates and frees the same
// large buffers over and over (gathered layers, whole gradients, activations of a few MB each);
// glibc's defaults give much of that back to the kernel (trimming the heap top, unmapping blocks
// above its mmap threshold) and then take it again, one page fault per 4 KiB page. On the 2-core
// machines that was about a quarter of a step's CPU time, and it made speed swing from run to run
// (docs/architecture.md, "Threads and memory"). ConfigureHostAllocator keeps freed memory for reuse
// instead: every block comes from the heap (no mmap, whatever its size: above glibc's 32 MiB
// mmap threshold ceiling are the vocabulary-sized tensors, refaulted on every step otherwise), and
// up to 1 GiB of free heap top is kept. Peak memory is unchanged; resident memory stays at its peak.
#pragma once

#include "common/status.h"

namespace eft::trainer {

// Call first thing in main, before threads exist. Leaves glibc's settings alone when the user set
// any (GLIBC_TUNABLES with a malloc tunable, or MALLOC_*_ variables) or EFT_MALLOC_DEFAULTS=1.
// Internal when glibc refused a setting (training works, only slower).
Status ConfigureHostAllocator();

}  // namespace eft::trainer
