// CRC-32C (Castagnoli), as in iSCSI, ext4 and LevelDB: checkpoint manifests and data caches
// checksum their files with it. Uses the SSE4.2 instruction when the CPU has it (~8 GB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace eft {

// `crc` continues an earlier value: Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);  // table-driven, for tests

}  // namespace eft
