// Lock annotations that clang's -Wthread-safety checks at compile time: which mutex guards which
// member (GUARDED_BY), which functions must be called with it held (REQUIRES) or without it
// (EXCLUDES). Under clang they expand to its thread-safety attributes; under other compilers to
// nothing, so they cost nothing and change no behaviour. The unit tests thread_safety.* compile the
// libraries of common/, controller/, worker/ and trainer/ with clang and -Werror=thread-safety
// (tests/unit/thread_safety_check.py), so a violated annotation fails them.
//
// Names as in clang's documentation ("Thread Safety Analysis"). gRPC's headers bring in Abseil's
// legacy macros of the same names (absl/base/internal/thread_annotations.h) that expand to the same
// attributes; each name here is therefore defined only if it is not yet, whichever comes first.
#pragma once

#if defined(__clang__)
#define EFT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define EFT_THREAD_ANNOTATION(x)
#endif

// A class that is a lock (eft::Mutex).
#ifndef CAPABILITY
#define CAPABILITY(name) EFT_THREAD_ANNOTATION(capability(name))
#endif
// A RAII class that holds a lock for its lifetime (eft::MutexLock).
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY EFT_THREAD_ANNOTATION(scoped_lockable)
#endif

// The member may be read or written only with the mutex held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) EFT_THREAD_ANNOTATION(guarded_by(x))
#endif
// What the pointer points to may be used only with the mutex held (the pointer itself is free).
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) EFT_THREAD_ANNOTATION(pt_guarded_by(x))
#endif

// The caller must hold the mutex(es).
#ifndef REQUIRES
#define REQUIRES(...) EFT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
// The caller must not hold the mutex(es): the function takes them itself.
#ifndef EXCLUDES
#define EXCLUDES(...) EFT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif

// The function takes / releases the mutex(es) (with no argument: `this` itself).
#ifndef ACQUIRE
#define ACQUIRE(...) EFT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) EFT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif

// The function returns a reference to the given mutex (lets callers name it in annotations).
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) EFT_THREAD_ANNOTATION(lock_returned(x))
#endif

// Opts one function out of the analysis. Only for what the analysis cannot follow, with a comment
// saying why the locking is right.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS EFT_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

