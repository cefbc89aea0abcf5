#!/usr/bin/env bash
# docs/python.md from a user's seat: a clean clone of the committed tree, a fresh virtual environment,
# `pip install .` (the extension, with CUDA when nvcc is on PATH, and the command line) with the test
# extra (torch from PyPI, used on the CPU here, and fla-core for flash-linear-attention's reference), then
# the command line's main job and the Python tests against the installed package, never the source tree.
# No test skips for want of torch; only the CUDA tests skip, and only without a GPU.
# Usage: tests/python/venv_install.sh [pytest args...]   (.ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git clone -q --no-local "$repo" "$work/src"
# KDAGRAPH_VENV_SYSTEM_PACKAGES=1 (.ci/run) lets the environment see the machine's packages, where CI
# installed the test extra's torch once, rather than unpacking it into every fresh environment.
venv_options=()
[ "${KDAGRAPH_VENV_SYSTEM_PACKAGES:-}" = 1 ] && venv_options=(--system-site-packages)
python3 -m venv "${venv_options[@]}" "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
echo "-- pip install . (a clean clone of $(git -C "$repo" rev-parse --short HEAD))"
start=$SECONDS
# KDAGRAPH_ENABLE_CUDA=OFF in the environment builds the wheel without the CUDA backend even where nvcc is
# on PATH (.ci/run sets it): pyproject.toml hands it to CMake, for this script as for a plain pip.
"$work/venv/bin/python" -m pip install -q "$work/src[test]"
echo "-- installed in $((SECONDS - start)) s"

cd "$work"  # away from the sources: `import kdagraph` must find the installed package
"$work/venv/bin/python" -c "import kdagraph, sys; print('kdagraph', kdagraph.__file__, 'cuda build:', kdagraph.built_with_cuda)"
"$work/venv/bin/python" -c "import torch; print('torch', torch.__version__, 'cuda available:', torch.cuda.is_available())"
"$work/venv/bin/kdagraph" run --backend cpu --rounds 10 | tail -4
"$work/venv/bin/python" -m pytest -q -rs "$work/src/tests/python" "$@"
