#include "ops/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "ops/mpi.h"

namespace kolo {
namespace {

constexpr int kNameBytes = 64;

std::string ErrnoText(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

}  // namespace

Status MapHostSegment(MPI_Comm comm, const char* prefix, size_t bytes, HostSegment* segment) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char name[kNameBytes] = {};
  int fd = -1;
  if (rank == 0) {
    std::random_device rd;
    std::snprintf(name, sizeof(name), "/%s-%d-%08x", prefix, static_cast<int>(getpid()), rd());
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      segment->error = ErrnoText("shm_open");
    } else if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
      segment->error = std::string("posix_fallocate: ") + std::strerror(rc);
    }
    if (fd >= 0) segment->name = name;  // made: unlinked later, even when it failed here
    if (!segment->error.empty()) name[0] = '\0';
  }
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, comm), "MPI_Bcast"));
  if (name[0] != '\0') {
    if (rank != 0) {
      fd = shm_open(name, O_RDWR, 0600);
      if (fd < 0) segment->error = ErrnoText("shm_open");
    }
    if (fd >= 0) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        segment->error = ErrnoText("mmap");
      } else {
        segment->base = p;
      }
    }
  }
  if (fd >= 0) close(fd);
  return Status::OK();
}

void UnlinkHostSegment(const HostSegment& segment) {
  if (!segment.name.empty()) shm_unlink(segment.name.c_str());
}

}  // namespace kolo
