#!/usr/bin/env bash
# One GPU session, run in the repository root on the lent GPU machine with $OUT set:
#   (a) build the extension (pip, no network: --no-deps --no-build-isolation)   -> $OUT/build.log
#   (a2) benchmarks/cuda_division_probe.py: how ATen's CUDA division takes a number (printed in the summary)
#   (a3) benchmarks/cuda_norm_probe.py: mixed-dtype norms on CUDA, all-low norms against fp32 (in the summary)
#   (a4) the C++ tests of the CUDA code paths (torch_mp_cuda_tests: CudaGraphRunner, ...) built in build/ (needs
#        GTest there: libgtest-dev, or its .deb carried)                           -> $OUT/build.log
#   (b) the CUDA tests: build/torch_mp_cuda_tests, then
#       python3 -m pytest -q -m cuda tests/python                              -> $OUT/tests.log
#   (b2) benchmarks/cuda_timing_probe.py: per-module or drifting TorchScript timings -> $OUT/probe.log
#   (c) benchmarks/cuda_speed.py, JSON written after every cell                 -> $OUT/cuda_speed.json, bench.log
#       per cell: call time, GPU time (queue pre-filled), host enqueue time, kernels per forward (one profiled call)
#   (c2) with --export-bench: benchmarks/export_speed.py on CUDA instead of (c)  -> $OUT/export_speed.log
#   (c3) with --zoo-table: benchmarks/zoo_table.py --device cuda instead of (c)  -> $OUT/ZOO_cuda.md, zoo.log
#   (d) markdown preview and bar chart                                          -> $OUT/CUDA_SPEED.md, cuda_speed.png
#   (e) a short summary, printed last (the caller sees only the output's tail)
# At most 7 files in $OUT (the device tool returns 8).
#
#   bash benchmarks/gpu_session.sh [--skip-build] [--skip-tests] [--skip-probe] [--skip-bench] [--budget-s 570]
#        [--tests-timeout-s 180] [--tests-args "-k graphs"] [--bench-args "--models resnet50 --dtypes fp16"]
#        [--export-bench "--models resnet50_ibn_a --dtype fp16 --batches 1 32"] [--zoo-table "--models tv.resnet50"]
#        [-- more benchmark arguments]
#
# --export-bench ARGS: issue 35's CUDA rows (AOTInductor of torch_mp.export beside torch.compile, ...) in place of
# cuda_speed.py: export_speed.py --device cuda ARGS, its table printed after every row (export_speed.log keeps the
# last complete one when `timeout` ends it). Each row compiles two AOTInductor packages and two torch.compile
# modules: give it one or two models per call.
#
# --zoo-table ARGS: issue 37's "every zoo model's fp16 cosine on CUDA >= 0.9995" in place of cuda_speed.py:
# zoo_table.py --device cuda ARGS (every zoo model in fp16 and bf16 without --models), its table in ZOO_cuda.md.
#
# --budget-s: the wall-clock seconds this call may use in all (the device tool kills a command at 600 s). The
# benchmark gets what the build and tests left: its torch.compile columns stop 150 s before the end
# (--deadline-s), everything else 40 s before (--hard-deadline-s), and `timeout` ends it 20 s before, so the
# render and the summary always run. A --deadline-s / --hard-deadline-s in the bench arguments wins. Each cell also
# takes 10 host enqueue samples, 10 GPU-time samples (each behind a sleep of 3 enqueue times) and one profiled call
# (on a CPU: 1-1.6 calls' time plus ~5 ms; on a GPU each cell's profile.profile_s records it);
# --bench-args "--no-profile --gpu-samples 0" leaves call times only.
set -u
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gpu_session_out}
mkdir -p "$OUT"

SKIP_BUILD=0 SKIP_TESTS=0 SKIP_PROBE=0 SKIP_BENCH=0
BUDGET=570 TESTS_TIMEOUT=180
TESTS_ARGS="" BENCH_ARGS=() EXPORT_BENCH="" ZOO_TABLE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) SKIP_BUILD=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-probe) SKIP_PROBE=1 ;;
    --skip-bench) SKIP_BENCH=1 ;;
    --budget-s) BUDGET=$2; shift ;;
    --tests-timeout-s) TESTS_TIMEOUT=$2; shift ;;
    --tests-args) TESTS_ARGS=$2; shift ;;
    --bench-args) read -r -a more <<< "$2"; BENCH_ARGS+=("${more[@]}"); shift ;;
    --export-bench) EXPORT_BENCH=$2; SKIP_BENCH=1; shift ;;
    --zoo-table) ZOO_TABLE=$2; SKIP_BENCH=1; shift ;;
    --) shift; BENCH_ARGS+=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

SUMMARY=()
note() { SUMMARY+=("$*"); echo "== $*"; }
remaining() { echo $((BUDGET - SECONDS)); }

finish() {
  echo
  echo "================ summary (${SECONDS} s of ${BUDGET} s) ================"
  if [ -s "$OUT/cuda_speed.json" ]; then
    "$PY" benchmarks/cuda_speed.py --summary "$OUT/cuda_speed.json" 2>&1 | tail -n 120
  fi
  for line in "${SUMMARY[@]}"; do echo "$line"; done
  echo "files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
}

echo "== $(date -u +%FT%TZ) $(hostname), repo $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -n 2
"$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "available", torch.cuda.is_available())' 2>&1

# (a) build
if [ "$SKIP_BUILD" = 0 ]; then
  start=$SECONDS
  if MAX_JOBS=16 "$PY" -m pip install --no-build-isolation --no-deps --no-index -e . > "$OUT/build.log" 2>&1; then
    note "build: ok ($((SECONDS - start)) s)"
  else
    # a compiler error fails fast; a packaging problem (pip, setuptools, wheel) gets one in-place build instead
    if ! grep -q -E "ninja: build stopped|error: command .* failed|FAILED: |error: " "$OUT/build.log" \
        || grep -q -E "No module named|invalid command|BackendUnavailable" "$OUT/build.log"; then
      echo "---- pip install failed; trying setup.py build_ext --inplace ----" >> "$OUT/build.log"
      MAX_JOBS=16 "$PY" setup.py build_ext --inplace -j 16 >> "$OUT/build.log" 2>&1
    else
      false
    fi
    if [ $? = 0 ]; then
      note "build: pip failed, in-place build ok ($((SECONDS - start)) s; see build.log)"
    else
      echo "---- build.log (tail) ----"; tail -n 80 "$OUT/build.log"
      note "build: FAILED ($((SECONDS - start)) s); stopping"
      finish
      exit 1
    fi
  fi
else
  note "build: skipped"
fi
# how the extension was linked: a copy of libstdc++ inside it (static linking) breaks iostream formatting there
so=$(ls torch_mp/_C*.so 2> /dev/null | head -n 1)
if [ -n "$so" ]; then
  {
    echo "---- link facts"
    "$PY" -c 'import sysconfig; print("LDSHARED", sysconfig.get_config_var("LDSHARED")); print("LDCXXSHARED", sysconfig.get_config_var("LDCXXSHARED"))'
    env | grep -E "^(LDFLAGS|CFLAGS|CXXFLAGS|CC|CXX|NVCC_.*)=" || true
    echo "libstdc++ internals defined in $so: $(nm "$so" 2> /dev/null | grep -c -E ' [Tt] .*(read_utf8_code_point|_ZNSo9_M_insertImEERSoT_)')"
    readelf -d "$so" | grep NEEDED
  } >> "$OUT/build.log" 2>&1
  note "$(grep -E '^libstdc\+\+ internals' "$OUT/build.log")"
fi
if ! "$PY" -c "import torch_mp, torch_mp._C" > /dev/null 2>> "$OUT/build.log"; then
  echo "---- import torch_mp failed ----"; tail -n 30 "$OUT/build.log"
  note "import torch_mp: FAILED (benchmark runs its baseline columns only)"
fi

# (a2) a fact of ATen's CUDA kernels the fused kernel must copy and the tests have not pinned down
note "$("$PY" benchmarks/cuda_division_probe.py 2>&1 | tail -n 1)"
# (a3) which CUDA norms take fp32 parameters with a low input, and how close all-low norms come to fp32
note "$("$PY" benchmarks/cuda_norm_probe.py 2>&1 | tail -n 1)"

# (a4) the C++ CUDA tests, in the build/ the extension's library was built in (its objects are not compiled again)
if [ "$SKIP_TESTS" = 0 ]; then
  start=$SECONDS
  if { cmake -S . -B build -DTORCH_MP_BUILD_TESTS=ON && cmake --build build -j 16 --target torch_mp_cuda_tests; } \
      >> "$OUT/build.log" 2>&1; then
    note "C++ CUDA tests: built ($((SECONDS - start)) s)"
  else
    note "C++ CUDA tests: build FAILED ($((SECONDS - start)) s; build.log's tail: $(tail -n 1 "$OUT/build.log"))"
  fi
fi

# (b) CUDA tests
if [ "$SKIP_TESTS" = 0 ] && [ -x build/torch_mp_cuda_tests ]; then
  timeout -k 10 "$TESTS_TIMEOUT" build/torch_mp_cuda_tests > "$OUT/tests.log" 2>&1
  note "C++ CUDA tests (rc $?): $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests.log" | tr '\n' ' ')"
fi
if [ "$SKIP_TESTS" = 0 ]; then
  if ! "$PY" -c "import pytest" 2> /dev/null; then
    note "tests: pytest is not installed here; skipped"
  else
    start=$SECONDS
    read -r -a targs <<< "$TESTS_ARGS"
    # --continue-on-collection-errors: a module needing a package the machine lacks (graphviz) skips no CUDA test
    timeout -k 10 "$TESTS_TIMEOUT" "$PY" -m pytest -q -m cuda -p no:cacheprovider --continue-on-collection-errors -rfE \
      --tb=short tests/python "${targs[@]}" \
      >> "$OUT/tests.log" 2>&1
    rc=$?
    result=$(grep -E "(passed|failed|error|skipped|no tests ran)" "$OUT/tests.log" | tail -n 1)
    [ $rc = 124 ] && result="TIMED OUT after ${TESTS_TIMEOUT} s; ${result}"
    note "tests (rc $rc, $((SECONDS - start)) s): ${result:-see tests.log}"
    while read -r line; do SUMMARY+=("   $line"); echo "   $line"; done \
      < <(grep -E "^(FAILED|ERROR) " "$OUT/tests.log" | head -n 15)
  fi
else
  note "tests: skipped"
fi

# (b2) the same graph timed twice and .half() TorchScript, alternating: where the TorchScript columns' noise comes from
if [ "$SKIP_PROBE" = 0 ]; then
  start=$SECONDS
  timeout -k 5 120 "$PY" benchmarks/cuda_timing_probe.py > "$OUT/probe.log" 2>&1
  note "timing probe (rc $?, $((SECONDS - start)) s):"
  while read -r line; do SUMMARY+=("   $line"); echo "   $line"; done < <(grep -E "per-round medians|Error" "$OUT/probe.log")
fi

# (c) benchmark; a crash (segfault, abort) is resumed from the JSON: the cell it died in is recorded as crashed
if [ "$SKIP_BENCH" = 0 ]; then
  attempt=1 resume=()
  while :; do
    left=$(remaining)
    if [ "$left" -lt 90 ]; then
      note "bench: not started (attempt $attempt), only ${left} s of the budget left"
      break
    fi
    deadline=$((left - 150)); [ $deadline -lt 0 ] && deadline=0
    hard=$((left - 40))
    start=$SECONDS
    timeout -k 5 $((left - 20)) "$PY" benchmarks/cuda_speed.py --device cuda --out "$OUT/cuda_speed.json" \
      --deadline-s "$deadline" --hard-deadline-s "$hard" "${resume[@]}" "${BENCH_ARGS[@]}" 2>&1 \
      | tee -a "$OUT/bench.log" | grep -v -E "^\s*$|Warning|warn\("
    rc=${PIPESTATUS[0]}
    note "bench attempt $attempt (rc $rc, $((SECONDS - start)) s; compile deadline ${deadline} s, hard ${hard} s)"
    # 124/137/143: timeout; 130: interrupted (SIGTERM); 128+n otherwise: died of signal n
    if [ "$rc" -ge 128 ] && [ "$rc" != 130 ] && [ "$rc" != 137 ] && [ "$rc" != 143 ] && [ "$attempt" -lt 6 ] \
        && [ -s "$OUT/cuda_speed.json" ]; then
      attempt=$((attempt + 1))
      resume=(--resume "$OUT/cuda_speed.json")
      continue
    fi
    break
  done
else
  note "bench: skipped"
fi

# (c2) the export front's benchmark on CUDA
if [ -n "$EXPORT_BENCH" ]; then
  left=$(remaining)
  start=$SECONDS
  read -r -a eargs <<< "$EXPORT_BENCH"
  timeout -k 5 $((left - 20)) "$PY" benchmarks/export_speed.py --device cuda "${eargs[@]}" > "$OUT/export_speed.log" 2>&1
  note "export bench (rc $?, $((SECONDS - start)) s); its last table:"
  while read -r line; do SUMMARY+=("   $line"); echo "   $line"; done \
    < <(awk '/^\| model \| batch \| fp32 ms/ {table = ""} /^\|/ {table = table $0 "\n"} END {printf "%s", table}' "$OUT/export_speed.log")
fi

# (c3) the zoo's accuracy on CUDA
if [ -n "$ZOO_TABLE" ]; then
  left=$(remaining)
  start=$SECONDS
  read -r -a zargs <<< "$ZOO_TABLE"
  [ "$ZOO_TABLE" = "all" ] && zargs=()
  timeout -k 5 $((left - 20)) "$PY" benchmarks/zoo_table.py --device cuda "${zargs[@]}" > "$OUT/zoo.log" 2>&1
  note "zoo table (rc $?, $((SECONDS - start)) s); rows below cosine 0.9995:"
  cp benchmarks/results/ZOO_cuda.md "$OUT/ZOO_cuda.md" 2> /dev/null
  while read -r line; do SUMMARY+=("   $line"); echo "   $line"; done \
    < <(awk -F'|' '$4 ~ /fp16/ && $5 ~ /[0-9]/ && $5 + 0 < 0.9995' "$OUT/ZOO_cuda.md" 2> /dev/null | head -n 20)
fi

# (d) render
if [ -s "$OUT/cuda_speed.json" ]; then
  "$PY" benchmarks/cuda_speed.py --render "$OUT/cuda_speed.json" --md "$OUT/CUDA_SPEED.md" \
    --png "$OUT/cuda_speed.png" > /tmp/gpu_session_render.$$ 2>&1 || tail -n 20 /tmp/gpu_session_render.$$
  rm -f /tmp/gpu_session_render.$$
fi
rm -f "$OUT"/cuda_speed.json.partial
finish
