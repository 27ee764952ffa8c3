#include "discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "elastic_policy.h"

namespace kolo::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// More output than any host list: the script is not what it should be.
constexpr size_t kMaxOutputBytes = 1 << 20;

// Reads what `fd` has now into `out`; closes it and sets it to -1 at its end.
void Drain(int& fd, std::string& out) {
  char buf[8192];
  while (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (out.size() < kMaxOutputBytes + 1) out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    close(fd);
    fd = -1;
  }
}

std::string FirstLine(const std::string& text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return text.substr(b, std::min(text.find('\n', b), b + 200) - b);
}

}  // namespace

DiscoveryScript::~DiscoveryScript() {
  if (pid_ > 0) {
    Kill();
    waitpid(pid_, nullptr, 0);
  }
  if (out_ >= 0) close(out_);
  if (err_ >= 0) close(err_);
}

void DiscoveryScript::Start() {
  if (pid_ > 0) return;
  stdout_.clear();
  stderr_.clear();
  timed_out_ = false;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    start_error_ = std::strerror(errno);
    return;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    start_error_ = std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return;
  }
  started_ = Clock::now();
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);  // the script and whatever it starts: one group to kill
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    // Without a shell: the script must be executable (Horovod's rule).
    char* argv[] = {const_cast<char*>(path_.c_str()), nullptr};
    execv(argv[0], argv);
    std::fprintf(stderr, "cannot run it: %s\n", std::strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid_ < 0) {
    start_error_ = std::strerror(errno);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return;
  }
  out_ = out_pipe[0];
  err_ = err_pipe[0];
  fcntl(out_, F_SETFL, O_NONBLOCK);
  fcntl(err_, F_SETFL, O_NONBLOCK);
}

void DiscoveryScript::Kill() {
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);  // before its setpgid
}

std::optional<Result<std::vector<HostSlots>>> DiscoveryScript::Poll() {
  if (pid_ <= 0) {
    if (start_error_.empty()) return std::nullopt;  // not running
    std::string error = start_error_;
    start_error_.clear();
    return Result<std::vector<HostSlots>>(
        Status::Internal("cannot start the host discovery script '" + path_ + "': " + error));
  }
  Drain(out_, stdout_);
  Drain(err_, stderr_);
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) {
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    if (seconds <= kDiscoveryTimeoutSeconds && stdout_.size() <= kMaxOutputBytes) {
      return std::nullopt;
    }
    timed_out_ = seconds > kDiscoveryTimeoutSeconds;
    Kill();
    r = waitpid(pid_, &status, 0);
  }
  Drain(out_, stdout_);
  Drain(err_, stderr_);
  // What the script left behind holds no pipe of ours open.
  for (int* fd : {&out_, &err_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  pid_ = -1;
  return Finish(status);
}

Result<std::vector<HostSlots>> DiscoveryScript::Finish(int wait_status) {
  const std::string who = "host discovery script '" + path_ + "'";
  const std::string said = FirstLine(stderr_).empty() ? "" : ": " + FirstLine(stderr_);
  if (timed_out_) {
    return Status::Aborted(who + " did not finish within " +
                           std::to_string(static_cast<int>(kDiscoveryTimeoutSeconds)) +
                           " s; it was killed");
  }
  if (stdout_.size() > kMaxOutputBytes) {
    return Status::InvalidArgument(who + " printed more than 1 MiB; expected one host per line");
  }
  if (WIFSIGNALED(wait_status)) {
    return Status::Aborted(who + " was killed by signal " + std::to_string(WTERMSIG(wait_status)) +
                           said);
  }
  const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1;
  if (code != 0) {
    return Status::Aborted(who + " exited with code " + std::to_string(code) + said);
  }
  Result<std::vector<HostSlots>> hosts = ParseDiscoveryOutput(stdout_, default_slots_);
  if (!hosts.ok()) return Status::InvalidArgument(who + " printed " + hosts.status().message());
  return hosts;
}

Result<std::vector<HostSlots>> DiscoveryScript::RunNow() {
  Start();
  for (;;) {
    std::optional<Result<std::vector<HostSlots>>> done = Poll();
    if (done.has_value()) return *done;
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    poll(fds, 2, 100);
  }
}

}  // namespace kolo::launcher
