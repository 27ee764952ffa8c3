/* A libnccl.so.2 from before NCCL 2.14 as far as kolo can tell: it has
 * ncclGetVersion and none of the functions kolo needs after it (no
 * ncclCommFinalize). nccl_api_fallback_test.cc loads it first, as a
 * framework's old NCCL would be, and checks that kolo passes it by. */
int ncclGetVersion(int* version) {
  *version = 21305;
  return 0;
}
