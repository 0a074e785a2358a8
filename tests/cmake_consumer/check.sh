#!/bin/bash
# check.sh BUILD_DIR TORCH_DIR: installs the torch_mp build in BUILD_DIR to BUILD_DIR/consumer/install, builds this
# folder's project against it with find_package(torch_mp), and runs it.
set -euo pipefail
build="$1" torch_dir="$2" here="$(cd "$(dirname "$0")" && pwd)"
work="$build/consumer"
rm -rf "$work"
cmake --install "$build" --prefix "$work/install" > /dev/null
# a CUDA build of Torch looks for the CUDA toolkit again: give it what the torch_mp build found
cuda=()
for variable in CUDA_TOOLKIT_ROOT_DIR TORCH_CUDA_ARCH_LIST; do
  value="$(sed -n "s/^$variable:[A-Z]*=//p" "$build/CMakeCache.txt")"
  [ -z "$value" ] || cuda+=("-D$variable=$value")
done
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/install;$torch_dir" "${cuda[@]}" > /dev/null
cmake --build "$work/build"
"$work/build/consumer"
