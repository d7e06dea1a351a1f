# Shared setup for scripts/setup-and-bench and scripts/test (sourced, not run).
#
#   fc_setup            system packages (only when missing, only as root),
#                       the .venv with the pinned Python packages
#   fc_configure        CMake configure of build/ (CUDA when nvcc exists)
#   fc_build [targets]  cmake --build build
#
# Idempotent: a second run reuses .venv (a stamp file records the installed
# pins) and build/. Knobs (environment): PYTHON (interpreter for the venv,
# default python3), FLASHCORE_CUDA (AUTO/ON/OFF, default AUTO),
# FLASHCORE_JOBS (default: number of cores), FLASHCORE_BUILD_DIR (default build).

FC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FC_VENV="$FC_ROOT/.venv"
FC_PY="$FC_VENV/bin/python"
FC_BUILD="${FLASHCORE_BUILD_DIR:-$FC_ROOT/build}"
FC_JOBS="${FLASHCORE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# The pins used everywhere (pyproject.toml's build requirements match).
FC_PY_PINS=(
  "nvidia-cutlass==4.2.0.0"
  "nanobind==2.9.2"
  "scikit-build-core==0.11.6"
  "pytest==8.4.2"
  "numpy==2.3.4"
  "ml-dtypes==0.5.3"
  "nvidia-cuda-cuobjdump==13.4.92"
  "nvidia-cuda-nvdisasm==13.4.92"
)

fc_log() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*"; }
fc_die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

fc_have_gtest() {
  local d
  for d in /usr/lib/*-linux-gnu /usr/lib /usr/lib64 /usr/local/lib /usr/local/lib64; do
    if [ -e "$d/libgtest.a" ] || [ -e "$d/libgtest.so" ]; then
      [ -e /usr/include/gtest/gtest.h ] || [ -e /usr/local/include/gtest/gtest.h ] && return 0
    fi
  done
  return 1
}

fc_cmake_ok() {
  command -v cmake >/dev/null 2>&1 || return 1
  local v
  v="$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')"
  [ -n "$v" ] || return 1
  local major="${v%%.*}" minor="${v#*.}"
  [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 24 ]; }
}

fc_python_has_headers() {
  "$1" -c 'import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' 2>/dev/null
}

# System packages: installed with apt-get only when missing and only as root.
fc_system_packages() {
  local want_gtest="${1:-yes}"
  local python="${PYTHON:-python3}"
  local missing=()
  fc_cmake_ok || missing+=(cmake)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v "$python" >/dev/null 2>&1 || missing+=(python3)
  if command -v "$python" >/dev/null 2>&1; then
    "$python" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
    fc_python_has_headers "$python" || missing+=(python3-dev)
  else
    missing+=(python3-venv python3-dev)
  fi
  if [ "$want_gtest" = yes ] && ! fc_have_gtest; then missing+=(libgtest-dev); fi
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "system packages: all present"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "system packages missing: ${missing[*]} (not root: not installing them)"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "system packages missing: ${missing[*]} (no apt-get)"; return 0; }
  fc_log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

fc_venv() {
  local python="${PYTHON:-python3}"
  if [ ! -x "$FC_PY" ]; then
    fc_log "creating $FC_VENV"
    "$python" -m venv "$FC_VENV" || fc_die "could not create the venv with $python (install python3-venv)"
  fi
  local stamp="$FC_VENV/.flashcore-pins" want
  want="$(printf '%s\n' "${FC_PY_PINS[@]}")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "venv: pinned packages already installed ($FC_VENV)"
    return 0
  fi
  fc_log "pip install ${FC_PY_PINS[*]}"
  "$FC_PY" -m pip install -q --disable-pip-version-check --no-input "${FC_PY_PINS[@]}"
  printf '%s\n' "$want" >"$stamp"
}

fc_setup() {
  fc_log "setup"
  fc_system_packages "${1:-yes}"
  fc_cmake_ok || fc_die "cmake >= 3.24 is required (apt-get install cmake)"
  command -v ninja >/dev/null 2>&1 || fc_die "ninja is required (apt-get install ninja-build)"
  fc_venv
}

# CUDA: AUTO builds the sm_90a kernels when nvcc can be found (on PATH, via
# CUDACXX, or in /usr/local/cuda/bin); otherwise the CPU reference only.
fc_cuda_mode() {
  local mode="${FLASHCORE_CUDA:-AUTO}"
  local default_nvcc="${FLASHCORE_DEFAULT_NVCC:-/usr/local/cuda/bin/nvcc}"
  if [ "$mode" != OFF ] && [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 \
      && [ -x "$default_nvcc" ]; then
    export CUDACXX="$default_nvcc"
  fi
  if [ "$mode" = AUTO ]; then
    if [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null 2>&1; then
      echo "CUDA: nvcc found (${CUDACXX:-$(command -v nvcc)}): building the CUDA backend" >&2
    else
      echo "CUDA: nvcc not found: skipping the CUDA backend (CPU reference only)" >&2
      mode=OFF
    fi
  fi
  echo "$mode"
}

# Without -lineinfo and with a translation unit per tile: the same SASS, less
# compile time (CMakeLists.txt, FLASHCORE_LINEINFO and FLASHCORE_GROUPED_UNITS).
fc_configure() {
  local tests="${1:-ON}" cuda
  cuda="$(fc_cuda_mode)"
  fc_log "cmake configure ($FC_BUILD, CUDA=$cuda, tests=$tests)"
  local gen=()
  [ -f "$FC_BUILD/CMakeCache.txt" ] || gen=(-G Ninja)
  cmake -S "$FC_ROOT" -B "$FC_BUILD" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DFLASHCORE_CUDA="$cuda" \
    -DFLASHCORE_BUILD_TESTS="$tests" \
    -DFLASHCORE_BUILD_PYTHON=ON \
    -DFLASHCORE_LINEINFO=OFF \
    -DFLASHCORE_GROUPED_UNITS=ON \
    -DPython_EXECUTABLE="$FC_PY" \
    -DPython3_EXECUTABLE="$FC_PY"
}

fc_build() {
  fc_log "cmake --build $FC_BUILD -j $FC_JOBS ${*:+--target $*}"
  if [ "$#" -gt 0 ]; then
    cmake --build "$FC_BUILD" -j "$FC_JOBS" --target "$@"
  else
    cmake --build "$FC_BUILD" -j "$FC_JOBS"
  fi
}
