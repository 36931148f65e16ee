// Whether this build runs under a sanitizer (`make sanitize`, `make sanitize-thread`; docs/fuzzing.md).
// Their runtimes bring their own malloc and refuse some dynamic-loader flags, so the few places that
// tune glibc's allocator or rely on RTLD_DEEPBIND ask this instead of failing under them.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EFT_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define EFT_UNDER_SANITIZER 1
#endif
#endif
#ifndef EFT_UNDER_SANITIZER
#define EFT_UNDER_SANITIZER 0
#endif

namespace eft {

inline constexpr bool kUnderSanitizer = EFT_UNDER_SANITIZER != 0;

}  // namespace eft
