// main() for the multi-rank tests: MPI is initialized here (so each test can
// create and shut down its own kolo runtime), and only rank 0 prints gtest's
// progress unless a test fails elsewhere.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  if (failed && rank != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", rank);
  MPI_Finalize();
  return failed;
}
