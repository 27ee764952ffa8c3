/* The glibc functions newer than the wheel's glibc that kolo's binaries call
 * (GCC 12's libstdc++.a, built against a newer glibc, and the headers' inline
 * code among them), written with what glibc 2.28 has. Linked into every binary
 * of the portable wheel (scripts/wheel/toolchain.cmake), hidden: each binary
 * uses its own, and nothing else in the process sees them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

/* libstdc++ skips atomic reference counting while this says that the process
 * has one thread; 0 keeps the atomic path, which is always correct. */
char __libc_single_threaded = 0;

/* glibc 2.30: a wait with a deadline on the given clock. libstdc++'s
 * condition_variable::wait_until(steady_clock) calls it. A condition variable
 * made by PTHREAD_COND_INITIALIZER (as std::condition_variable's) times out on
 * CLOCK_REALTIME, so the deadline is carried over as the time left: a change of
 * the wall clock during the wait moves the wake-up, which the caller, re-reading
 * its own clock, takes as a spurious wake-up (what libstdc++ did before 2.30). */
int pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock,
                           const struct timespec* deadline) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, deadline);
  if (clock != CLOCK_MONOTONIC) return EINVAL;
  struct timespec now, wall;
  clock_gettime(CLOCK_MONOTONIC, &now);
  clock_gettime(CLOCK_REALTIME, &wall);
  long long left =
      (long long)(deadline->tv_sec - now.tv_sec) * 1000000000LL + (deadline->tv_nsec - now.tv_nsec);
  if (left < 0) left = 0;
  long long ns = wall.tv_nsec + left % 1000000000LL;
  struct timespec until = {
      wall.tv_sec + (time_t)(left / 1000000000LL) + (time_t)(ns / 1000000000LL),
      (long)(ns % 1000000000LL)};
  return pthread_cond_timedwait(cond, mutex, &until);
}

/* glibc 2.32: a signal's abbreviation ("TERM" for SIGTERM), NULL for a number
 * without one (0, real-time signals, out of range), as glibc's table on x86_64. */
const char* sigabbrev_np(int sig) {
  static const char* const names[] = {
      NULL,   "HUP",  "INT",  "QUIT", "ILL",    "TRAP",   "ABRT",  "BUS",  "FPE",  "KILL", "USR1",
      "SEGV", "USR2", "PIPE", "ALRM", "TERM",   "STKFLT", "CHLD",  "CONT", "STOP", "TSTP", "TTIN",
      "TTOU", "URG",  "XCPU", "XFSZ", "VTALRM", "PROF",   "WINCH", "POLL", "PWR",  "SYS"};
  if (sig < 0 || sig >= (int)(sizeof names / sizeof names[0])) return NULL;
  return names[sig];
}

/* glibc 2.36: 32 random bits from the kernel. libstdc++'s std::random_device
 * ("default" token) calls it; getrandom (glibc 2.25) reads the same source.
 * It cannot fail in glibc either: a kernel without getrandom ends the process. */
uint32_t arc4random(void) {
  uint32_t value;
  size_t got = 0;
  while (got < sizeof value) {
    ssize_t n = getrandom((char*)&value + got, sizeof value - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      abort();
    }
  }
  return value;
}
