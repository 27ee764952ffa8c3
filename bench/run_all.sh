#!/usr/bin/env bash
# Runs every kolo benchmark on this machine and writes bench/results/:
# one JSON file per benchmark, report.md (the tables) and PNG plots.
#
#   bench/run_all.sh            # about 14 minutes on the 2-core machine
#   QUICK=1 bench/run_all.sh    # fewer repeats, smaller sizes: a smoke run
#
# Sections 1-5 run every comparison inside one job: the peer (raw MPI, gloo)
# and kolo take turns in alternating rounds on the same buffers, so machine
# noise hits both. Section 6 runs each strategy in a job of its own, as a
# training job runs, jobs alternated (bench/standalone.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null
out=${OUT_DIR:-bench/results}
mkdir -p "$out"
# The commit measured, so that regenerating the report later still names it.
echo "{\"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\"}" > "$out/run.json"
export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}
kolorun=build/launcher/kolorun
py=/usr/bin/python3
np=${NP:-2}

if [ -n "${QUICK:-}" ]; then
  max=$((4 << 20)); seconds=0.05; steps=4; iters=300; models=resnet50; batches=2; jobs=2
else
  max=$((256 << 20)); seconds=0.4; steps=12; iters=3000; models=resnet50,bert_base; batches=5
  jobs=10
fi

echo "1/6 size sweep: C++ API and kolo.torch against raw MPI_Allreduce"
$kolorun -np "$np" build/bench/allreduce_sweep "$max" "$seconds" > "$out/sweep_cpp.json.tmp"
sed 's/^\[0\]<stdout>://' "$out/sweep_cpp.json.tmp" > "$out/sweep_cpp.json" && rm "$out/sweep_cpp.json.tmp"
$kolorun -np "$np" $py bench/torch_bench.py --out "$out/sweep_torch.json" sweep \
  --max-bytes "$max" --seconds "$seconds" > /dev/null

echo "2/6 model gradient sets: kolo against raw MPI (packed, per tensor, fused) and gloo"
$kolorun -np "$np" $py bench/torch_bench.py --out "$out/models.json" models \
  --steps "$steps" --models "$models" > /dev/null

echo "3/6 small-op latency through kolo.torch"
$kolorun -np "$np" $py bench/torch_bench.py --out "$out/latency.json" latency \
  --iterations "$iters" > /dev/null

echo "4/6 coordinator cost at 2 ... 16384 simulated ranks"
build/bench/coordinator_cost $([ -n "${QUICK:-}" ] && echo 256) > "$out/coordinator.json"

echo "5/6 training overhead: synthetic ResNet-50 with and without the allreduce"
for mode in on off; do
  flag=""; [ "$mode" = off ] && flag=--no-allreduce
  $kolorun -np "$np" $py examples/pytorch_synthetic_benchmark.py --model resnet50 \
    --batch-size 8 --image-size 64 --threads 1 --num-warmup-batches 2 \
    --num-batches-per-iter "$batches" --num-iters 5 $flag --json "$out/training_$mode.json" > /dev/null
done

echo "6/6 standalone jobs: ResNet-50, BERT-base and the small workload, each strategy in its own job"
OUT="$out/standalone_resnet50.json" bench/standalone.sh "$jobs" resnet50 \
  "kolo raw_per_tensor raw_packed" > /dev/null
OUT="$out/standalone_bert_base.json" bench/standalone.sh "$((jobs / 2))" bert_base \
  "kolo raw_per_tensor" > /dev/null
OUT="$out/standalone_small.json" ALONE_ARGS="--steps 200 --warmup 20" bench/standalone.sh \
  "$((jobs / 2))" small "kolo kolo_grouped raw_per_tensor raw_packed" > /dev/null

# Issue 16: needs scripts/setup.sh's .venv (TensorFlow); kolo.torch's side runs on $py.
if .venv/bin/python -c "import tensorflow" 2> /dev/null; then
  echo "7/7 kolo.tensorflow against kolo.torch: ResNet-50's gradients, each path in its own jobs"
  $py bench/tf_bench.py --out "$out/tf_vs_torch.json" jobs --jobs "$((jobs / 2))" \
    --steps "$steps" > /dev/null
else
  echo "7/7 skipped: no .venv with TensorFlow (scripts/setup.sh makes it)"
fi

# Issue 17: needs the .venv with JAX, optax and flax; kolo.torch's side runs on $py.
if .venv/bin/python -c "import jax, optax" 2> /dev/null; then
  echo "8/8 kolo.jax against kolo.torch and JAX's psum: ResNet-50's gradients, each path in its own jobs"
  JAX_PLATFORMS=cpu $py bench/jax_bench.py --out "$out/jax_vs_torch.json" jobs \
    --jobs "$((jobs / 2))" --steps "$steps" --copies-jobs 2 > /dev/null
else
  echo "8/8 skipped: no .venv with JAX and optax (scripts/setup.sh makes it)"
fi

$py bench/report.py "$out"
echo "bench: results in $out/ (report.md, *.json, *.png)"
