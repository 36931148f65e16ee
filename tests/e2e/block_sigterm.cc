// eft-test-block-sigterm PROGRAM ARGS...: runs PROGRAM with SIGTERM blocked, so the program never
// receives a stop request however it installs its handlers (a blocked signal stays pending across
// exec, and every thread inherits the mask). resize_test wraps eft-train ranks in it to play ranks
// that ignore the controller's request to stop with a checkpoint; SIGKILL still ends them.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: eft-test-block-sigterm PROGRAM [ARGS...]\n");
    return 2;
  }
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &term, nullptr) != 0) {
    std::perror("eft-test-block-sigterm: sigprocmask");
    return 1;
  }
  execvp(argv[1], argv + 1);
  std::perror("eft-test-block-sigterm: exec");
  return 127;
}
