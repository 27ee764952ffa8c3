#!/usr/bin/env bash
# Builds kolo with CUDA and checks its GPU path on the machine it runs on: a
# GPU machine lent to a session (run from the carried tree, with gpu-kit/ made
# here by scripts/gpu_kit.sh), or any machine of a user's own with a GPU, the
# CUDA toolkit and NCCL. See docs/gpu.md.
#
#   scripts/gpu_check.sh [--kit DIR] [--build DIR] [--out DIR] STEP...
#
# Steps, in the order `all` runs them (each appends to the summary):
#   build     unpack the kit (if --kit names one), configure with CUDA for this
#             machine's GPU (native; sm_90 where no GPU answers), build
#   suite     the whole normal CTest suite of that build (gpu.np1 included)
#   sanitize  the GPU tests under compute-sanitizer: memcheck, racecheck, synccheck
#   tworanks  two ranks on the one GPU: the GPU tests at np=2 (what NCCL allows)
#   torch     kolo.torch on CUDA tensors: test/python/test_torch_cuda.py at np=1
#             and np=2, the synthetic ResNet-50 benchmark on the GPU
#   speed     bench/gpu_allreduce (kolo vs ncclAllReduce, 4 B to 1 GiB; the fusion
#             copy kernel vs cudaMemcpyAsync) and torch.distributed's NCCL backend
#             on the same tensors
#   faults    mismatched devices across ranks, two ranks pinned to one GPU, a rank
#             killed inside a GPU collective: a named error on every surviving
#             rank, no hang
# Part B of the GPU issue fits in two calls of the device tool:
#   `build suite sanitize` and `build tworanks torch speed faults`.
#
# Out ($OUT, else --out, else gpu-check-out/): summary.txt (one line per step:
# name, ok/FAILED, seconds; the machine's GPU and driver first), speed.json, and
# logs.tgz with every step's full log. Three files: the device tool brings
# back at most eight.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

kit=""
build=build-gpu
out=${OUT:-$root/gpu-check-out}
steps=()
while [ $# -gt 0 ]; do
  case $1 in
    --kit) kit=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    all) steps+=(build suite sanitize tworanks torch speed faults); shift ;;
    build | suite | sanitize | tworanks | torch | speed | faults) steps+=("$1"); shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (steps: build suite sanitize tworanks torch speed faults all)" >&2; exit 2 ;;
  esac
done
[ ${#steps[@]} -gt 0 ] || { echo "gpu_check: name at least one step (or all); --help lists them" >&2; exit 2; }
[ -z "$kit" ] && [ -f "$root/gpu-kit/MANIFEST" ] && kit=$root/gpu-kit

mkdir -p "$out"
logs=$(mktemp -d)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
python=${GPU_CHECK_PYTHON:-$(command -v python3)}

if [ -n "$kit" ]; then
  # shellcheck source=gpu_kit_env.sh
  source "$root/scripts/gpu_kit_env.sh" "$kit" "${GPU_KIT_DIR:-/tmp/kolo-kit}" || exit 1
fi
export PATH=$PATH:/usr/local/cuda/bin
mpirun=$(command -v mpirun || true)
mpiflags=(--oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)
[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)

gpu_name=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1)
note "machine: ${gpu_name:-no GPU answers nvidia-smi}; $(nproc) cores; kit: ${kit:-none}"

# NCCL: the CUDA toolkit's, else the one pip installed beside PyTorch.
nccl_dir() {
  local d
  for d in "${NCCL_HOME:-}" /usr/local/cuda /usr; do
    [ -n "$d" ] && [ -f "$d/include/nccl.h" ] && { echo "$d"; return; }
  done
  "$python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0]))' 2>/dev/null
}

step_build() {
  local nccl arch lib
  nccl=$(nccl_dir)
  [ -n "$nccl" ] || { echo "no nccl.h found (set NCCL_HOME)"; return 1; }
  lib=$(ls "$nccl"/lib/libnccl.so "$nccl"/lib/libnccl.so.2 "$nccl"/lib/x86_64-linux-gnu/libnccl.so 2>/dev/null | head -1)
  arch=native
  [ -n "$gpu_name" ] || arch=90
  echo "NCCL: $nccl ($lib); CUDA architectures: $arch; Python: $python"
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DKOLO_NCCL_INCLUDE="$nccl/include" -DKOLO_NCCL_LIBRARY="$lib" \
    -DKOLO_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$python" -DKOLO_TF_PYTHON="$root/.no-tf-python" \
    ${GPU_KIT_CMAKE_ARGS:-} || return 1
  cmake --build "$build" -j "$(nproc)"
}

step_suite() {
  # The packaging tests fetch from PyPI, which a lent machine cannot reach.
  # In parallel first; what failed runs again alone, so that a test that only
  # lost a race for the cores is told apart from one that fails.
  cd "$build" || return 1
  ctest --output-on-failure --timeout 300 -j "$(($(nproc) / 3))" -LE packaging && return 0
  echo "== the failed tests again, one at a time"
  ctest --output-on-failure --timeout 300 --rerun-failed
}

step_sanitize() {
  local tool rc=0
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on PATH"; return 1; }
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool"
    "$mpirun" -np 1 "${mpiflags[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$build/test/kolo_gpu_tests" || rc=1
  done
  return $rc
}

step_tworanks() {
  # Both ranks see GPU 0. NCCL refuses two ranks of one communicator on one
  # device; what kolo makes of that is the finding, so the step passes only
  # when every rank either passes or names the problem (no hang: timeout).
  timeout 120 "$mpirun" -np 2 "${mpiflags[@]}" "$build/test/kolo_gpu_tests"
  local rc=$?
  [ $rc -ne 124 ] || { echo "tworanks: HUNG (timeout 120 s)"; return 1; }
  echo "tworanks: exit $rc"
}

step_torch() {
  local rc=0
  export PYTHONPATH=$build/python
  for np in 1 2; do
    echo "== test_torch_cuda.py at np=$np"
    timeout 300 "$build/launcher/kolorun" -np "$np" "$python" -m pytest -q -p no:cacheprovider \
      "$root/test/python/test_torch_cuda.py" || rc=1
  done
  echo "== synthetic ResNet-50 with CUDA tensors, np=1"
  timeout 300 "$build/launcher/kolorun" -np 1 "$python" "$root/examples/pytorch_synthetic_benchmark.py" \
    --model resnet50 --batch-size 64 --num-iters 5 --json "$logs/resnet50_cuda.json" || rc=1
  return $rc
}

step_speed() {
  local rc=0
  export PYTHONPATH=$build/python
  echo "== kolo vs ncclAllReduce on the same buffers"
  timeout 300 "$build/launcher/kolorun" -np 1 "$build/bench/gpu_allreduce" >"$logs/gpu_allreduce.json" || rc=1
  echo "== the fusion copy kernel vs cudaMemcpyAsync device to device"
  timeout 120 "$build/bench/gpu_copy" >"$logs/gpu_copy.json" || rc=1
  echo "== kolo.torch vs torch.distributed (NCCL) on the same CUDA tensors"
  timeout 300 "$build/launcher/kolorun" -np 1 "$python" "$root/bench/gpu_torch_bench.py" \
    --json "$logs/gpu_torch.json" || rc=1
  "$python" - "$logs" "$out/speed.json" "$gpu_name" <<'EOF' || rc=1
import json, os, sys
logs, dest, gpu = sys.argv[1:]
result = {"gpu": gpu}
for name in ("gpu_allreduce", "gpu_copy", "gpu_torch", "resnet50_cuda"):
    path = os.path.join(logs, name + ".json")
    if os.path.exists(path) and os.path.getsize(path):
        with open(path) as f:
            result[name] = json.load(f)
json.dump(result, open(dest, "w"), indent=1)
EOF
  return $rc
}

step_faults() {
  local rc=0 status
  export PYTHONPATH=$build/python
  timeout 300 "$build/launcher/kolorun" -np 2 "$python" -m pytest -q -rs -s -p no:cacheprovider \
    "$root/test/python/test_torch_cuda_faults.py" -k "not killed" || rc=1
  # The killed rank ends the job with its exit code; what counts is that the
  # survivors name the failure and that nothing hangs.
  echo "== a rank killed inside a GPU collective"
  timeout 120 "$build/launcher/kolorun" -np 2 "$python" -m pytest -q -rs -s -p no:cacheprovider \
    "$root/test/python/test_torch_cuda_faults.py" -k killed
  status=$?
  [ $status -ne 124 ] || { echo "faults: the killed-rank run HUNG (timeout 120 s)"; rc=1; }
  echo "killed-rank run: exit $status"
  return $rc
}

for s in "${steps[@]}"; do
  start=$(date +%s)
  echo "== gpu_check: $s (log: $s.log)"
  "step_$s" >"$logs/$s.log" 2>&1
  rc=$?
  tail -n 15 "$logs/$s.log"
  note "$s: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $(($(date +%s) - start)) s"
  [ "$s" = build ] && [ $rc -ne 0 ] && { note "build failed: later steps not run"; break; }
done
tar -czf "$out/logs.tgz" -C "$logs" .
rm -rf "$logs"
echo "== gpu_check summary ($out/summary.txt; logs in $out/logs.tgz)"
cat "$summary"
! grep -q FAILED "$summary"
