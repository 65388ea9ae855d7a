#!/usr/bin/env bash
# One run on a machine with an NVIDIA GPU and no network (the checkout copied there), in the
# order that matters when time on it is short:
#
#   bash benchmarks/gpu_machine.sh [gpu] [bench] [cpu]      (default: all three)
#
# Python packages the machine lacks (islpy, optuna and their needs) come as wheels in .whl/
# (pip download ... -d .whl, see docs/gpu.md; keep .whl/ out of git and copy it along with the
# checkout: a copy of the tracked files alone lacks it); tensorlang is installed from the
# checkout without build isolation. Each step runs under a time limit and prints its exit status, so one hung or
# failing step leaves the others' output. Logs go to $OUT (default /tmp/gpu_machine).
#   gpu:   the CUDA tests (the GPU-only ones in tests/test_cuda_device.py included) on the GPU
#   gpu-device: only the GPU-only tests
#   bench: benchmarks/gpu.py at the issue's sizes (CUDA events, against torch and Triton);
#          bench-auto: schedule="auto" alone against them; bench-blur: the blur's variants;
#          bench-variants: the variants of sgemm, softmax and conv2d (not the blur's);
#          bench-new: softmax, the blur and conv2d with their variants, 3 rounds (stop 46's
#          changes, made without a GPU: docs/gpu.md)
#   bench-four: softmax, the blur, conv2d and sgemm with all their variants, 2 rounds
#   bench-rules: conv2d, sgemm and softmax with their variants, 3 rounds
#   bench-stop48: softmax and conv2d with their variants (the code generator before stop 48's
#          changes among them), 3 rounds
#   profile: Nsight Compute's speed-of-light, warp-state and memory tables of the sgemm kernel
#          (profile-conv: of the conv2d kernel)
#   gpu-tune, cpu-tune: tensorlang tune matmul on the GPU (4096^3, 75 s) and on the CPU
#          (1024^3, 60 trials or 90 s)
#   cpu-blocks: float64 GEMM 1024^3 on all threads, the rule against auto:BLOCKS_PER_THREAD=4
#   cpu-stop49: GEMM 1024^3 float64/float32 on one thread and all threads (2048^3 too), the rule
#          against 8 x 3-vector tiles (24 accumulators) and A in micro-panels; then PolyBench's
#          GEMM-class kernels
#   cpu-fewer: PolyBench's GEMM-class kernels on all threads against FEWER_BLOCKS=0 (twice), then
#          all 30 kernels (--no-default)
#   cpu-stop51: GEMM 1024^3 float64/float32, one thread and all threads, the rule against
#          auto:PREFETCH_TILE=1 and the initialisation pass unfolded (FOLD_INIT=0); PolyBench's
#          GEMM-class kernels against PREFETCH_TILE=1; the triangles and 3mm on 8 threads
#   cpu-stop52: AVX2 code (haswell) GEMM 1024^3 float64 on 1 and 16 threads against the rows'
#          remainder as a piece of its own (PEEL_SHARED=0) and unfolded panel reads
#          (RANGE_FOLD=0); PolyBench gemm, 2mm, 3mm as skylake-avx512 code against RANGE_FOLD=0,
#          and the GEMM-class kernels as haswell code against PEEL_SHARED=0
#   cpu-stop53: batched GEMM 8 x 256^3 float32/float64 as AVX2 code (haswell) on 1 and 16
#          threads against the rows' remainder as a piece of its own (SHIFT_ROWS=0 with
#          SERIAL_TAILS=0), and conv2d / batched GEMM as haswell and skylake-avx512 code
#   cpu-stop54: batched GEMM 8 x 256^3 as haswell and skylake-avx512 code, one thread, against
#          LLVM's own addressing of the tile's rows (row_bases.ROW_BASES=0); llvm-mca's view
#   cpu-stop60: GEMM 1024^3 float64/float32 on 1 and 16 threads against heap buffers from malloc
#          (HEAP_ALIGN=0), 1000 x 1100 x 1200 and 2048^3, batched GEMM and conv2d, AVX2 (haswell)
#          GEMM, PolyBench's GEMM-class kernels and cholesky on 16 threads; one log, cpu60.log
#   cpu-partial: GEMM 1000 x 1100 x 1200 on 16 threads against whole row blocks only
#          (PARTIAL_BLOCKS=0), both orders; AVX2 code likewise; on one thread against 10-row tiles
#          (PARTIAL_ROWS=0); PolyBench's gemm, symm, trmm, 2mm, 3mm against PARTIAL_BLOCKS=0;
#          GEMM 1024^3 on one thread again (15 rounds); one log, cpu60b.log
#   cpu:   GEMM 1024^3 float32/float64 on the machine's CPU, one thread and all threads, against
#          NumPy's BLAS (benchmarks/gemm_packed.py), and the CPU's LLVM name
set -u
OUT=${OUT:-/tmp/gpu_machine}
mkdir -p "$OUT" /tmp/tune
export PYTHONUNBUFFERED=1
phases=${*:-gpu bench cpu}

step() {  # step SECONDS LOGNAME COMMAND...  (APPEND=1: added to the log, not replacing it)
    local limit=$1 log=$2 start rc
    shift 2
    echo "== $* (limit ${limit} s)"
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" 2>&1 | tee ${APPEND:+-a} "$OUT/$log"
    rc=${PIPESTATUS[0]}
    echo "== rc=$rc after $(( $(date +%s) - start )) s"
}

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
if ! python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
        >"$OUT/install.log" 2>&1; then  # (an old setuptools): the package's folders linked
    tail -3 "$OUT/install.log"
    mkdir -p /tmp/shim && cp -r tensorlang /tmp/shim/ && ln -sfn "$PWD/schedule" \
        /tmp/shim/tensorlang/schedule && ln -sfn "$PWD/autotune" /tmp/shim/tensorlang/autotuner \
        && ln -sfn "$PWD/backends" /tmp/shim/tensorlang/backends || exit 1
    export PYTHONPATH=/tmp/shim${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi -L
lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket"
echo "L2 of cpu0 shared with: $(cat /sys/devices/system/cpu/cpu0/cache/index2/shared_cpu_list \
    2>/dev/null)"  # (issue 16: whether the model's L2 per thread is a core's)
python3 - <<'EOF'
import importlib
for m in ("llvmlite", "islpy", "optuna", "numpy", "cuda.bindings", "torch", "triton", "cupy"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(m, "missing:", exc)
from tensorlang.backends.cuda.driver import device
print(device().info)
EOF

for phase in $phases; do
    case $phase in
    gpu)
        step 200 pytest_gpu.log python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 200 \
            tests/test_cuda_device.py tests/test_cuda.py tests/test_cuda_rules.py \
            tests/test_cuda_specialize.py tests/test_cuda_codegen.py ;;
    gpu-device)
        step 120 pytest_gpu.log python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 100 \
            tests/test_cuda_device.py ;;
    bench)
        step 240 gpu_bench.log python3 benchmarks/gpu.py --repeat 20 --rounds 2 ;;
    bench-variants)
        step 200 gpu_bench_variants.log python3 benchmarks/gpu.py --repeat 20 --rounds 2 \
            --workloads sgemm,softmax,conv2d ;;
    bench-new)  # stop 46's changes: softmax's output loop unrolled, the blur's shifted rows
        step 200 gpu_bench_new.log python3 benchmarks/gpu.py --repeat 30 --rounds 3 \
            --workloads softmax,blur,conv2d ;;
    bench-four)  # every variant of the four workloads (compiling them takes ~90 s)
        step 330 gpu_bench_four.log python3 benchmarks/gpu.py --repeat 20 --rounds 2 \
            --workloads softmax,blur,conv2d,sgemm ;;
    bench-rules)  # the rules changed in stop 47 against their variants, 3 rounds
        step 240 gpu_bench_rules.log python3 benchmarks/gpu.py --repeat 20 --rounds 3 \
            --workloads conv2d,sgemm,softmax ;;
    bench-stop48)  # stop 48's code generator changes against the code generator before them
        step 200 gpu_bench_stop48.log python3 benchmarks/gpu.py --repeat 20 --rounds 3 \
            --workloads softmax,conv2d ;;
    bench-blur)
        step 120 gpu_bench_blur.log python3 benchmarks/gpu.py --repeat 30 --rounds 3 \
            --workloads blur ;;
    bench-auto)
        step 120 gpu_bench_auto.log python3 benchmarks/gpu.py --repeat 30 --rounds 2 \
            --auto-only ;;
    profile)  # Nsight Compute on the rule-based sgemm's kernel (works on Firecracker hosts)
        step 200 ncu_sgemm.log ncu --section SpeedOfLight --section WarpStateStats \
            --section MemoryWorkloadAnalysis_Tables -k regex:C_k0 -c 1 \
            python3 benchmarks/gpu.py --workloads sgemm --auto-only --repeat 1 --rounds 1 ;;
    profile-conv)  # the same tables for the rule-based conv2d's whole-tile kernel
        step 150 ncu_conv2d.log ncu --section SpeedOfLight --section WarpStateStats \
            --section MemoryWorkloadAnalysis_Tables -k regex:O_k0 -c 1 \
            python3 benchmarks/gpu.py --workloads conv2d --auto-only --repeat 1 --rounds 1 ;;
    gpu-tune)
        TENSORLANG_CACHE=/tmp/tlcache step 120 gpu_tune.log python3 -m \
            tensorlang.autotuner.cli tune matmul --target cuda --shape M=4096,N=4096,K=4096 \
            --timeout 75 --log /tmp/tune/gpu_tune.jsonl
        cp /tmp/tune/gpu_tune.jsonl "$OUT/" ;;
    cpu-tune)  # issue 16's run on 16 cores: the tuner must not cache a loser
        TENSORLANG_CACHE=/tmp/tlcache step 150 cpu_tune.log python3 -m \
            tensorlang.autotuner.cli tune matmul --shape M=1024,N=1024,K=1024 --trials 60 \
            --timeout 90 --log /tmp/tune/cpu_tune.jsonl
        cp /tmp/tune/cpu_tune.jsonl "$OUT/" ;;
    cpu-blocks)  # issue 16: smaller row blocks claimed dynamically, on all threads
        ROUNDS=9 step 90 gemm_blocks_f64.log python3 benchmarks/gemm_packed.py \
            1024x1024x1024 f64 auto,auto:BLOCKS_PER_THREAD=4 ;;
    cpu-stop49)  # issue 16: variants of the packed GEMM, interleaved with NumPy
        wide=auto:PACKED_VECTORS=3+cpu_model.MAX_ACCUMULATORS=24
        f64="auto,$wide,auto:A_PANELS=1,$wide+A_PANELS=1"
        for rep in 1 2; do
            TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=11 step 120 \
                "gemm49_1t_f64_$rep.log" python3 benchmarks/gemm_packed.py 1024x1024x1024 f64 "$f64"
            ROUNDS=11 step 90 "gemm49_all_f64_$rep.log" \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 f64 "$f64"
        done
        TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=11 step 60 gemm49_1t_f32.log \
            python3 benchmarks/gemm_packed.py 1024x1024x1024 f32 "auto,$wide"
        ROUNDS=11 step 60 gemm49_all_f32.log \
            python3 benchmarks/gemm_packed.py 1024x1024x1024 f32 "auto,$wide"
        ROUNDS=7 step 90 gemm49_all_f64_2048.log \
            python3 benchmarks/gemm_packed.py 2048x2048x2048 f64 "auto,$wide"
        step 170 polybench49.log python3 benchmarks/polybench.py --no-default --rounds 3 \
            --kernels gemm,2mm,3mm,symm,syrk,syr2k,trmm,covariance,correlation,doitgen ;;
    cpu-fewer)  # issue 16: packed triangles on 16 threads (heuristic.FEWER_BLOCKS)
        for rep in 1 2; do
            step 90 "polybench_fewer_$rep.log" python3 benchmarks/polybench.py --no-default \
                --rounds 5 --against FEWER_BLOCKS=0 \
                --kernels gemm,2mm,3mm,symm,syrk,syr2k,trmm,covariance,correlation,doitgen
        done
        step 360 polybench_all.log python3 benchmarks/polybench.py --no-default --rounds 3 ;;
    cpu-stop51)  # issue 16: the packed tile's prefetch of C (PREFETCH_TILE), interleaved; 3mm
        # on all threads and the triangles on 8 (stop 50's row blocks, untimed there)
        pf="auto,auto:PREFETCH_TILE=1,auto:tensorlang.schedule.fold_init.FOLD_INIT=0"
        for dt in f64 f32; do
            TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=11 step 90 \
                "gemm51_1t_$dt.log" python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt "$pf"
            ROUNDS=11 step 60 "gemm51_all_$dt.log" \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt "$pf"
        done
        step 120 polybench51.log python3 benchmarks/polybench.py --no-default --rounds 5 \
            --against PREFETCH_TILE=1 \
            --kernels gemm,2mm,3mm,symm,syrk,syr2k,trmm,covariance,correlation,doitgen
        TENSORLANG_NUM_THREADS=8 OPENBLAS_NUM_THREADS=8 step 90 polybench51_8t.log \
            python3 benchmarks/polybench.py --no-default --rounds 5 \
            --kernels syrk,syr2k,covariance,correlation,3mm ;;
    cpu-stop52)  # issue 16: the rows' remainder peeled in the shared loops (PEEL_SHARED) and
        # the folded panel reads (RANGE_FOLD), on AVX2 code (haswell) and skylake-avx512 code
        v="auto,auto:tensorlang.schedule.realize.PEEL_SHARED=0"
        v="$v,auto:tensorlang.schedule.simplify.RANGE_FOLD=0"
        for thr in 1 16; do
            TARGET_CPU=haswell OPENBLAS_CORETYPE=Haswell TENSORLANG_NUM_THREADS=$thr \
                OPENBLAS_NUM_THREADS=$thr ROUNDS=11 step 90 "gemm52_haswell_${thr}t.log" \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 f64 "$v"
        done
        TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 step 120 polybench52_skx.log \
            python3 benchmarks/polybench.py --no-default --rounds 5 --cpu skylake-avx512 \
            --against tensorlang.schedule.simplify.RANGE_FOLD=0 --kernels gemm,2mm,3mm
        OPENBLAS_CORETYPE=Haswell TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 step 150 \
            polybench52_haswell.log python3 benchmarks/polybench.py --no-default --rounds 5 \
            --cpu haswell --against tensorlang.schedule.realize.PEEL_SHARED=0 \
            --kernels gemm,2mm,3mm,symm,syrk,syr2k,covariance ;;
    cpu-stop53)  # issue 16: batched GEMM's last row tile shifted (SHIFT_ROWS, SERIAL_TAILS)
        for thr in 1 16; do
            for dt in float32 float64; do
                OPENBLAS_CORETYPE=Haswell TENSORLANG_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr \
                    step 60 "bmm53_haswell_${dt}_${thr}t.log" python3 benchmarks/builtin.py \
                    batch_matmul --cpu haswell --dtype $dt --rounds 9 \
                    --against SHIFT_ROWS=0+tensorlang.schedule.nest.SERIAL_TAILS=0
            done
        done
        for cpu in haswell skylake-avx512; do
            core=Haswell; [ $cpu = skylake-avx512 ] && core=SkylakeX
            for wl in batch_matmul conv2d; do
                OPENBLAS_CORETYPE=$core TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                    step 60 "${wl}53_${cpu}_1t.log" python3 benchmarks/builtin.py $wl \
                    --cpu $cpu --dtype float32 --rounds 7
            done
        done ;;
    cpu-stop54)  # issue 16: a register tile's rows of A from registers (row_bases.ROW_BASES)
        for cpu in haswell skylake-avx512; do
            core=Haswell; [ $cpu = skylake-avx512 ] && core=SkylakeX
            for dt in float32 float64; do
                OPENBLAS_CORETYPE=$core TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                    step 60 "bmm54_${cpu}_${dt}_1t.log" python3 benchmarks/builtin.py \
                    batch_matmul --cpu $cpu --dtype $dt --rounds 11 \
                    --against tensorlang.backends.llvm.row_bases.ROW_BASES=0
            done
        done
        step 120 "mca54.log" python3 benchmarks/mca.py --workload batch_matmul \
            --against tensorlang.backends.llvm.row_bases.ROW_BASES=0 ;;
    cpu-stop60)  # issue 16: stops 50-59's code on 16 cores, in one log (8 files come back)
        export APPEND=1; log=cpu60.log
        python3 -m tensorlang.autotuner.cli target | tee -a "$OUT/$log"
        al=auto,auto:tensorlang.backends.llvm.memory.HEAP_ALIGN=0
        for thr in 1 16; do
            for dt in f64 f32; do
                TENSORLANG_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr ROUNDS=11 step 60 $log \
                    python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt $al
            done
        done
        for thr in 1 16; do
            for dt in f32 f64; do
                TENSORLANG_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr ROUNDS=9 step 60 $log \
                    python3 benchmarks/gemm_packed.py 1000x1100x1200 $dt auto
            done
        done
        ROUNDS=7 step 60 $log python3 benchmarks/gemm_packed.py 2048x2048x2048 f64 auto
        for thr in 16 1; do
            for wl in batch_matmul conv2d; do
                for dt in float32 float64; do
                    TENSORLANG_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr step 60 $log \
                        python3 benchmarks/builtin.py $wl --dtype $dt --rounds 7
                done
            done
        done
        for thr in 1 16; do
            for dt in f32 f64; do
                OPENBLAS_CORETYPE=Haswell TARGET_CPU=haswell TENSORLANG_NUM_THREADS=$thr \
                    OPENBLAS_NUM_THREADS=$thr ROUNDS=9 step 60 $log \
                    python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt auto
            done
        done
        step 200 $log python3 benchmarks/polybench.py --no-default --rounds 3 --kernels \
            gemm,2mm,3mm,symm,syrk,syr2k,trmm,covariance,correlation,doitgen,cholesky ;;
    cpu-partial)  # issue 16: a shorter last row block (heuristic.PARTIAL_BLOCKS), interleaved
        export APPEND=1; log=cpu60b.log
        p=auto:PARTIAL_BLOCKS=0
        for order in "auto,$p" "$p,auto"; do
            for dt in f64 f32; do
                ROUNDS=11 step 60 $log python3 benchmarks/gemm_packed.py 1000x1100x1200 $dt $order
            done
        done
        for sh in 1024x1024x1024 1000x1100x1200; do
            for dt in f32 f64; do
                OPENBLAS_CORETYPE=Haswell TARGET_CPU=haswell ROUNDS=9 step 60 $log \
                    python3 benchmarks/gemm_packed.py $sh $dt auto,$p
            done
        done
        for dt in f64 f32; do  # one thread: the model's 8-row tiles with a shorter last block
            TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=11 step 60 $log \
                python3 benchmarks/gemm_packed.py 1000x1100x1200 $dt auto,auto:PARTIAL_ROWS=0
        done
        step 150 $log python3 benchmarks/polybench.py --no-default --rounds 5 \
            --kernels gemm,symm,trmm,2mm,3mm --against PARTIAL_BLOCKS=0
        for dt in f32 f64; do
            TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=15 step 60 $log \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt auto
        done ;;
    cpu)
        python3 -m tensorlang.autotuner.cli target
        for dt in f32 f64; do
            TENSORLANG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ROUNDS=5 step 60 "gemm_1t_$dt.log" \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt auto
            ROUNDS=5 step 60 "gemm_all_$dt.log" \
                python3 benchmarks/gemm_packed.py 1024x1024x1024 $dt auto
        done ;;
    esac
done
