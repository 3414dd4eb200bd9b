#!/usr/bin/env bash
# The checks that need a GPU, in one go, for a machine lent for minutes (docs/gpu.md, "Verified on a real GPU").
#
#   bash benchmarks/gpu_checks.sh OUTDIR
#
# Run from the repository root with a python whose torch sees CUDA (PYTHON=..., default python3); distgcn
# is taken from this checkout (PYTHONPATH), so nothing is installed. Each step writes its own log under
# OUTDIR and has its own time limit, so one that fails or hangs does not cost the others:
#   env.txt         the GPU, driver, torch/CUDA/NCCL and library versions
#   gpu-tests.txt   the tests that skip without CUDA: NCCL under torchrun against the single process,
#                   GPU memory against its prediction, the dropout masks hashed on the GPU against their definition,
#                   the device samplers on the GPU against the host samplers, minibatch training over NCCL
#                   (batches sampled on the GPU) against gloo on the CPU
#   sampling.txt    minibatch sampling throughput, host samplers against device samplers on the CPU and the GPU
#                   (benchmarks/sampler_throughput.py; sampling.json beside it), on the R-MAT below and, with
#                   SLASHDOT=PATH, on Slashdot with the share of a training step
#   two-ranks.txt   two NCCL ranks on a machine with one GPU: must stop at once with one clear line
#   speed.txt       epoch times of one rank on the GPU against one rank on all the CPU cores, same shard
#   profile.txt     where the GPU rank's epoch goes (benchmarks/profile_epoch.py)
#   threads.txt     only with SLASHDOT=PATH (soc-Slashdot0902.txt.gz): one CPU rank's epoch on Slashdot at 1, 2, 4,
#                   8 and all cores' threads (issue #15's threads target, on a machine with more than 2 cores)
set -u
out=${1:?usage: bash benchmarks/gpu_checks.sh OUTDIR}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$py" -c "import torch, numba, scipy, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'numba', numba.__version__, 'scipy', scipy.__version__, 'numpy', numpy.__version__); print('nccl', torch.cuda.nccl.version())"
    "$py" -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])" 2>&1 | tr -d "\\000" | tail -1
    echo "cores $(nproc)"
} > "$out/env.txt" 2>&1

# STEPS: which steps to run, in this order (default: all); env.txt is always written
steps=" ${STEPS:-tests sampling two-ranks speed profile threads} "
wants() { [[ "$steps" == *" $1 "* ]]; }

# -v and a limit per test, so that one test that hangs still leaves the others' verdicts in the log
if wants tests; then
timeout 420 "$py" -m pytest -p no:cacheprovider -v -rA --timeout 150 \
    tests/comm/test_torch_transport.py::test_nccl_under_torchrun_equals_single_process \
    tests/comm/test_torch_transport.py::test_predicted_peak_memory_within_25_percent_on_gpu \
    "tests/nn/test_dropout.py::test_mask_is_the_documented_hash_of_row_and_column[cuda]" \
    "tests/nn/test_hashing.py::test_the_int64_form_matches_the_oracle_on_numpy_and_torch[cuda]" \
    "tests/nn/test_models.py::test_gat_edge_mask_of_a_gpu_rank_is_the_cpu_mask_bit_for_bit[cuda]" \
    $(for p in 1 2 3 4; do for g in directed undirected; do
          echo "tests/sampling/test_device_samplers.py::test_device_samplers_draw_the_host_samplers_batches[$p-$g-cuda]"
      done; done) \
    tests/comm/test_torch_transport.py::test_minibatch_over_nccl_equals_gloo_on_the_cpu \
    > "$out/gpu-tests.txt" 2>&1
echo "exit status $?" >> "$out/gpu-tests.txt"
fi

# Sampling: the four samplers, host against device, R-MAT 2^20 (and Slashdot with the share of a training step)
if wants sampling; then
    timeout 150 "$py" benchmarks/sampler_throughput.py --graphs "synthetic:rmat,scale=${RMAT_SCALE:-20},edge_factor=12,features=64,classes=8" \
        --rw-batch-sizes 262144 --out "$out/sampling-rmat.json" > "$out/sampling.txt" 2>&1 || echo "exit status $?" >> "$out/sampling.txt"
    if [ -n "${SLASHDOT:-}" ]; then
        timeout 200 "$py" benchmarks/sampler_throughput.py --graphs "$SLASHDOT" --train-steps 10 \
            --out "$out/sampling-slashdot.json" >> "$out/sampling.txt" 2>&1 || echo "exit status $?" >> "$out/sampling.txt"
    fi
fi

scratch=$(mktemp -d)
if wants two-ranks; then
    timeout 60 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 -m distgcn train \
        --graph synthetic:sbm,n=20000 --partition random --backend nccl --epochs 3 --quiet > "$out/two-ranks.txt" 2>&1
    echo "exit status $?" >> "$out/two-ranks.txt"
fi

# Speed: R-MAT scale 20 (10^6 vertices, 1.3*10^7 entries), 64 random features -> 64 -> 8, float32, 2 layers.
if wants speed || wants profile; then
{
    timeout 120 "$py" -m distgcn partition synthetic:rmat,scale=${RMAT_SCALE:-20},edge_factor=12,features=64,classes=8 \
        --model random --parts 1 --out "$scratch/rmat20" --quiet || echo "partition: exit status $?"
    runs=("nccl --hidden 64" "gloo --hidden 64 --threads $(nproc)" "nccl --hidden 256" "gloo --hidden 256 --threads $(nproc)")
    wants speed || runs=()
    for run in "${runs[@]}"; do
        timeout 120 "$py" -m distgcn train "$scratch/rmat20" --backend $run --epochs 20 --quiet \
            --metrics "$scratch/m.jsonl" || echo "exit status $?"
        [ -s "$scratch/m.jsonl" ] && "$py" - "$scratch/m.jsonl" "$run" <<'EOF'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
epochs = [r["epoch_s"] for r in records[1:]]
print(f"{sys.argv[2]:<32} median epoch {statistics.median(epochs) * 1e3:8.2f} ms over epochs 2-{len(records)}"
      f" (min {min(epochs) * 1e3:.2f}, max {max(epochs) * 1e3:.2f}); last loss {records[-1]['loss']:.6f}")
EOF
        rm -f "$scratch/m.jsonl"
    done
} > "$out/speed.txt" 2>&1
fi
wants profile && timeout 90 "$py" benchmarks/profile_epoch.py "$scratch/rmat20" --backend nccl > "$out/profile.txt" 2>&1

# Threads inside one CPU rank: Slashdot (undirected), 64 random features -> 64 -> 8, float32, default (exact) first layer.
if [ -n "${SLASHDOT:-}" ] && wants threads; then
    {
        lscpu | grep -E '^(Model name|Thread|Core|Socket|L3)'
        timeout 120 "$py" -m distgcn partition "$SLASHDOT" --symmetrize --features 64 --classes 8 --model random \
            --parts 1 --out "$scratch/slashdot" --quiet || echo "partition: exit status $?"
        for threads in 1 2 4 8 $(nproc); do
            timeout 120 "$py" -m distgcn train "$scratch/slashdot" --backend gloo --hidden 64 --threads $threads \
                --epochs 12 --quiet --metrics "$scratch/m.jsonl" > /dev/null 2>&1 || echo "exit status $?"
            [ -s "$scratch/m.jsonl" ] && "$py" - "$scratch/m.jsonl" "$threads" <<'EOF'
import json, statistics, sys
epochs = [json.loads(line)["epoch_s"] for line in open(sys.argv[1])][2:]
print(f"--threads {sys.argv[2]:>3}  median epoch {statistics.median(epochs) * 1e3:8.2f} ms over epochs 3-{len(epochs) + 2}"
      f" (min {min(epochs) * 1e3:.2f}, max {max(epochs) * 1e3:.2f})")
EOF
            rm -f "$scratch/m.jsonl"
        done
    } > "$out/threads.txt" 2>&1
fi
rm -rf "$scratch"
