#!/bin/bash
# check.sh BUILD_DIR TORCH_DIR: installs the torch_mp build in BUILD_DIR to BUILD_DIR/consumer/install, builds this
# folder's project against it with find_package(torch_mp), and runs it.
set -euo pipefail
build="$1" torch_dir="$2" here="$(cd "$(dirname "$0")" && pwd)"
work="$build/consumer"
rm -rf "$work"
cmake --install "$build" --prefix "$work/install" > /dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/install;$torch_dir" > /dev/null
cmake --build "$work/build"
"$work/build/consumer"
