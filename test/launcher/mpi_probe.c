/* An MPI program without kolo, for the launcher's tests on the MPIs that kolo's
 * library is not built for yet (MPICH, Intel MPI): on_hydra.sh builds it with
 * MPICH's mpicc, for the MPICH ABI that Intel MPI's libmpi.so.12 provides too.
 *
 * Without FAULT it prints what print_ranks prints, "rank R size S local L/LS
 * cross C/CS sum X" (with PROBE_LIBRARY=1 also a line naming the MPI library
 * it loaded), and with a file name as its argument holds the job until that
 * file exists. With FAULT=kill|stop|raise, rank FAULT_RANK (default: the
 * last) misbehaves at allreduce step FAULT_STEP (default 3) as fault_job.py's
 * rank does, after writing the time to FAULT_STAMP; the other ranks wait in
 * MPI_Allreduce for it. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static int Env(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : fallback;
}

static void Stamp(void) {
  const char* path = getenv("FAULT_STAMP");
  struct timeval now;
  gettimeofday(&now, NULL);
  FILE* f = path != NULL ? fopen(path, "w") : NULL;
  if (f == NULL) return;
  fprintf(f, "%ld.%06ld\n", (long)now.tv_sec, (long)now.tv_usec);
  fclose(f);
}

/* Steps of one allreduce each; rank `fault_rank` misbehaves at `fault_step`. */
static int Train(const char* fault, int rank, int size) {
  const int fault_rank = Env("FAULT_RANK", size - 1), fault_step = Env("FAULT_STEP", 3);
  for (int step = 0; step < 2000; ++step) {
    if (rank == fault_rank && step == fault_step) {
      Stamp();
      if (strcmp(fault, "kill") == 0) kill(getpid(), SIGKILL);
      if (strcmp(fault, "stop") == 0) kill(getpid(), SIGSTOP);
      if (strcmp(fault, "raise") == 0) {
        fprintf(stderr, "a user error on rank %d at step %d\n", rank, step);
        exit(1);
      }
    }
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    usleep(1000);
  }
  printf("FAULT-NONE rank=%d\n", rank);
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, local = 0, local_size = 0, cross = 0, cross_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* fault = getenv("FAULT");
  if (fault != NULL && *fault != '\0') {
    const int code = Train(fault, rank, size);
    MPI_Finalize();
    return code;
  }
  MPI_Comm host, peers;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_rank(host, &local);
  MPI_Comm_size(host, &local_size);
  MPI_Comm_split(MPI_COMM_WORLD, local, rank, &peers);
  MPI_Comm_rank(peers, &cross);
  MPI_Comm_size(peers, &cross_size);
  float x = (float)(rank + 1), sum = 0;
  MPI_Allreduce(&x, &sum, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d size %d local %d/%d cross %d/%d sum %g\n", rank, size, local, local_size, cross,
         cross_size, sum);
  if (Env("PROBE_LIBRARY", 0)) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(library, &length);
    library[strcspn(library, "\n")] = '\0';
    printf("library %s\n", library);
  }
  fflush(stdout);
  while (argc > 1 && access(argv[1], F_OK) != 0) usleep(20000);
  MPI_Comm_free(&peers);
  MPI_Comm_free(&host);
  MPI_Finalize();
  return 0;
}
