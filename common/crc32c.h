// CRC-32C (Castagnoli), as in iSCSI, ext4 and LevelDB: checkpoint manifests and data caches
// checksum their files with it. Uses the SSE4.2 instruction when the CPU has it (~8 GB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace eft {

// `crc` continues an earlier value: Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);  // table-driven, for tests

// The CRC-32C of A followed by B, from crc_a = Crc32c(A), crc_b = Crc32c(B) and len_b = |B|, without
// the bytes: pieces of one file checksummed apart (by different writers) give the file's CRC.
// O(log len_b) 32x32 GF(2) matrix squarings (zlib's crc32_combine method, Castagnoli polynomial).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace eft
