// Reading a whole file into memory, and writing one from memory: the one way every eft program and
// test does it; and making what was written durable.
#pragma once

#include <string>

#include "common/status.h"

namespace eft {

// The bytes of the file at `path`, exactly as stored (binary-safe; an empty file is ""). Reads
// until end of file, so /proc files (which report size 0) work too.
// Errors name the path and the system's reason ("cannot read PATH: No such file or directory"):
// NOT_FOUND when the path does not exist, PERMISSION_DENIED when it may not be opened, and an
// I/O error (INTERNAL) otherwise, e.g. for a directory.
Result<std::string> ReadFileToString(const std::string& path);

// Creates or truncates `path` and writes `bytes` to it (not fsynced). Errors are IoError (INTERNAL) naming
// the path and the system's reason ("cannot write PATH: No space left on device"), which callers
// such as the checkpointer rely on to tell a full disk from other failures.
Status WriteStringToFile(const std::string& path, const std::string& bytes);

// fsync of a file, or of a directory (for the entries renamed or created in it). IoError naming the
// path and the system's reason ("fsync of PATH: ...").
Status FsyncFile(const std::string& path);
Status FsyncDir(const std::string& path);
// Replaces the file at `path` with `text`, durably and never half-written: written to `path` +
// ".tmp", fsynced, renamed over `path`. The directory is not fsynced (callers do it once for all
// their files).
Status WriteFileDurably(const std::string& path, const std::string& text);

}  // namespace eft
