#!/usr/bin/env bash
# Build upstream llama.cpp (llama-server, llama-quantize, ggml-rpc-server) per variant into runners/<variant>/.
#
# Usage: scripts/build_runners.sh [VARIANT...]      VARIANT: cpu cpu_avx2 vulkan cuda metal
#        scripts/build_runners.sh --this-host       only the variant ollama-py will run on this host (what
#                                                  `make run` builds first: cuda, metal, vulkan or cpu_avx2/cpu)
#        scripts/build_runners.sh --cuda-archs      the CUDA architectures a cuda build here compiles for, and why
#        scripts/build_runners.sh --check-cuda      configure the cuda variant and compile its backend object
#                                                  (ggml-cuda.cu, this machine's GPU architectures, else sm_90):
#                                                  proves the CUDA build in seconds instead of 40 minutes
#   no argument: every variant this host can build and run (vulkan: when glslc and the Vulkan loader's
#   development files are installed, e.g. Debian's libvulkan-dev glslc spirv-headers; cuda: when an NVIDIA GPU
#   is present, nvidia-smi -L lists it).
#
# CUDA: the toolkit is nvcc on PATH or CUDA_HOME; without either (a machine with only the NVIDIA driver) one is
# assembled from pinned, hash-checked PyPI wheels (scripts/cuda-wheels-13.txt: nvcc, crt, nvvm, runtime, cccl,
# cuBLAS) into the cache, cuda-toolkit-13, when the driver runs CUDA 13 (driver 580 or newer; CUDA 12's PyPI
# nvcc wheel holds only ptxas, no compiler: an older driver needs a CUDA 12 toolkit installed). It is compiled for
# this machine's GPUs only (nvidia-smi's compute capability, e.g. 9.0 -> sm_90): one architecture takes ~20 min
# on 2 cores, each more adds as much. OLLAMA_PY_CUDA_ARCHITECTURES=all (packagers) builds every architecture nvcc
# knows; it or CMAKE_CUDA_ARCHITECTURES may also name a list ("86;90"). The runner finds libcudart/libcublas at
# run time through runners/cuda/build-info.json's "library_path", which ollama-py puts on LD_LIBRARY_PATH.
#
# Source (one pinned upstream revision):
#   default                the llama.cpp tree vendored verbatim in the PyPI sdist llama-cpp-python==0.3.36,
#                          sha256-verified;
#   LLAMA_CPP_SRC=DIR      a llama.cpp checkout of your own;
#   LLAMA_CPP_GIT=URL LLAMA_CPP_REF=TAG   a git clone of that tag (for hosts that reach it).
# Cache: OLLAMA_PY_CACHE (default ~/.cache/ollama-py). Same source + same flags = nothing to do.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${OLLAMA_PY_CACHE:-$HOME/.cache/ollama-py}"
RUNNERS="${OLLAMA_RUNNERS_DIR:-$ROOT/runners}"
SDIST_VERSION="0.3.36"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
JOBS="${JOBS:-$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)}"
TARGETS=(llama-server llama-quantize ggml-rpc-server)

step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'build_runners: error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "step '$2' needs '$1', which is not installed ($3)"; }

need cmake configure "apt-get install cmake, or brew install cmake"
need c++ compile "apt-get install g++, or xcode-select --install"
need python3 source "install Python >= 3.11"

host_variants() {
  local arch; arch="$(uname -m)"
  if [ "$(uname -s)" = Darwin ] && [ "$arch" = arm64 ]; then echo metal; return; fi
  local v="cpu"
  if [ "$arch" = x86_64 ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo \
     && grep -qw f16c /proc/cpuinfo; then v="$v cpu_avx2"; fi
  if vulkan_buildable; then v="$v vulkan"; fi
  if nvidia_gpus_present && [ -z "$(cuda_unbuildable)" ]; then v="$v cuda"; fi
  echo "$v"
}

# Why the cuda variant cannot be built on this host with an NVIDIA GPU; empty when it can: a toolkit is installed,
# or the driver runs CUDA 13, whose PyPI wheels make one.
cuda_unbuildable() {
  if [ -n "${CUDA_HOME:-}" ] || command -v nvcc >/dev/null 2>&1; then return 0; fi
  local driver; driver="$(driver_cuda_major)"
  if [ -n "$driver" ] && [ "$driver" -lt 13 ]; then
    echo "the NVIDIA driver runs CUDA $driver, and only CUDA 13's PyPI wheels hold a compiler: install a CUDA \
$driver toolkit (nvcc; Debian/Ubuntu: nvidia-cuda-toolkit, or NVIDIA's cuda-toolkit-$driver-x packages) or update \
the driver to 580 or newer, then run make runners (the vulkan variant uses the card through the driver meanwhile)"
  fi
}

# The one variant ollama-py's runner choice (runner/variants.py) will take on this host: the vendor GPU build
# when there is such a GPU, vulkan when a Vulkan GPU shows, else the best CPU build.
this_host_variant() {
  local all; all=" $(host_variants) "
  case "$all" in *" cuda "*) echo cuda; return ;; *" metal "*) echo metal; return ;; esac
  if [[ "$all" == *" vulkan "* ]] && vulkan_gpu_present; then echo vulkan; return; fi
  case "$all" in *" cpu_avx2 "*) echo cpu_avx2 ;; *) echo cpu ;; esac
}

vulkan_gpu_present() {  # a real GPU (not llvmpipe, a CPU) in vulkaninfo's summary
  command -v vulkaninfo >/dev/null 2>&1 \
    && vulkaninfo --summary 2>/dev/null | grep >/dev/null 'deviceType *= *PHYSICAL_DEVICE_TYPE_\(DISCRETE\|INTEGRATED\)_GPU'
}

nvidia_gpus_present() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null
}

vulkan_buildable() {
  command -v glslc >/dev/null 2>&1 && [ -f /usr/include/vulkan/vulkan.h ] \
    && { [ -e /usr/lib/x86_64-linux-gnu/libvulkan.so ] || [ -e /usr/lib/aarch64-linux-gnu/libvulkan.so ] \
         || [ -e /usr/lib/libvulkan.so ] || ldconfig -p 2>/dev/null | grep -q 'libvulkan.so '; }
}

# ggml-vulkan.cpp uses vk::LayerSettingEXT (Vulkan headers >= 1.3.261) without a version guard; Debian bookworm
# ships 1.3.239. Rather than patch the pinned source, newer headers (trixie's libvulkan-dev: headers only, the
# loader stays the system's) are unpacked into the cache with a private apt state: nothing system-wide changes.
VULKAN_HEADERS_MIN=261
vulkan_include_dir() {
  local sys=/usr/include/vulkan/vulkan_core.h ver
  ver="$(sed -n 's/^#define VK_HEADER_VERSION \([0-9]*\).*/\1/p' "$sys" 2>/dev/null | head -1)"
  if [ -n "$ver" ] && [ "$ver" -ge "$VULKAN_HEADERS_MIN" ]; then echo /usr/include; return; fi
  local dir="$CACHE/vulkan-headers" apt="$CACHE/vulkan-headers.apt"
  if [ ! -f "$dir/usr/include/vulkan/vulkan_core.h" ]; then
    need apt-get vulkan-headers "Vulkan headers >= 1.3.$VULKAN_HEADERS_MIN are needed; install them and retry"
    step "vulkan: fetching Debian trixie's Vulkan headers (system headers are 1.3.${ver:-?}, need >= 1.3.$VULKAN_HEADERS_MIN)"
    rm -rf "$apt" "$dir.tmp"; mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc" "$dir.tmp"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
      >"$apt/etc/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
                -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Get::List-Cleanup=0)
    apt-get "${opts[@]}" -qq update >/dev/null 2>&1 || die "step 'vulkan-headers' failed: apt-get update (trixie lists)"
    (cd "$apt/archives" && apt-get "${opts[@]}" -qq download libvulkan-dev >/dev/null 2>&1) \
      || die "step 'vulkan-headers' failed: apt-get download libvulkan-dev from trixie"
    dpkg-deb -x "$(ls "$apt"/archives/libvulkan-dev_*.deb | head -1)" "$dir.tmp" \
      || die "step 'vulkan-headers' failed: dpkg-deb -x"
    rm -rf "$dir" "$apt"; mv "$dir.tmp" "$dir"
  fi
  echo "$dir/usr/include"
}

# ---- CUDA: the toolkit, its libraries, the architectures ----------------------------------------------------------
# CUDA_ROOT: the toolkit the cuda variant is compiled with (set by ensure_cuda_toolkit, in the main shell).
CUDA_ROOT=""

# The newest CUDA major the driver runs: "CUDA Version: 13.0" in nvidia-smi's header -> 13.
driver_cuda_major() {
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -1
}

# This machine's GPU architectures, nvidia-smi's compute capabilities without the dot ("9.0" -> "90"), as a
# CMake list; empty without an NVIDIA GPU.
gpu_archs() {
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .\r' | grep -E '^[0-9]+$' \
    | sort -n -u | paste -s -d ';' - || true
}

# The toolkit: CUDA_HOME, else nvcc on PATH, else one assembled from PyPI wheels for the driver's CUDA major.
ensure_cuda_toolkit() {
  [ -z "$CUDA_ROOT" ] || return 0
  if [ -n "${CUDA_HOME:-}" ]; then
    [ -x "$CUDA_HOME/bin/nvcc" ] || die "CUDA_HOME=$CUDA_HOME has no bin/nvcc"
    CUDA_ROOT="$CUDA_HOME"
  elif command -v nvcc >/dev/null 2>&1; then
    CUDA_ROOT="$(cuda_root)"
  else
    local why; why="$(cuda_unbuildable)"
    [ -z "$why" ] || die "no CUDA toolkit (no nvcc on PATH, no CUDA_HOME), and $why"
    toolkit_from_wheels 13 "$(driver_cuda_major)"
  fi
  export PATH="$CUDA_ROOT/bin:$PATH"
  step "cuda: toolkit $CUDA_ROOT ($("$CUDA_ROOT/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/CUDA \1/p'))"
}

# scripts/cuda-wheels-<major>.txt (pinned, hashed) installed with pip, then merged into one toolkit tree:
# bin/nvcc, include (with crt, cccl and cuBLAS), lib + lib64, nvvm, as nvcc.profile and CMake expect it.
toolkit_from_wheels() {
  local major="$1" driver="${2:-}" req="$ROOT/scripts/cuda-wheels-$1.txt" dir="$CACHE/cuda-toolkit-$1" stamp
  [ -f "$req" ] || die "no pinned CUDA $major wheels ($req)"
  stamp="$( (sha256sum "$req" 2>/dev/null || shasum -a 256 "$req") | cut -d' ' -f1)"
  CUDA_ROOT="$dir"
  if [ -x "$dir/bin/nvcc" ] && [ "$(cat "$dir/.requirements-sha256" 2>/dev/null)" = "$stamp" ]; then
    step "cuda: using the CUDA $major toolkit assembled from PyPI wheels ($dir)"; return
  fi
  step "cuda: no CUDA toolkit here (no nvcc on PATH, no CUDA_HOME); the driver runs CUDA ${driver:-?}: assembling \
the CUDA $major toolkit from PyPI wheels ($(basename "$req"): nvcc, crt, nvvm, runtime, cccl, cuBLAS; ~0.5-0.7 GB \
download, once) into $dir"
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/root"
  python3 -m pip install --no-deps --require-hashes --only-binary :all: --disable-pip-version-check \
      --progress-bar on --target "$dir.tmp/pip" -r "$req" >&2 \
    || die "step 'cuda-toolkit' failed: pip could not install the wheels of $req"
  step "cuda: laying the wheels out as a toolkit"
  local pkg f
  for pkg in "$dir.tmp"/pip/nvidia/*/; do
    cp -Rlf "$pkg." "$dir.tmp/root/" || die "step 'cuda-toolkit' failed: could not merge $pkg"
  done
  mkdir -p "$dir.tmp/root/dist-info"; mv "$dir.tmp"/pip/*.dist-info "$dir.tmp/root/dist-info/"
  rm -rf "$dir.tmp/pip" "$dir.tmp/root/__init__.py" "$dir.tmp/root/__pycache__"
  find "$dir.tmp/root" -name '__init__.py' -delete
  [ -x "$dir.tmp/root/bin/nvcc" ] || die "step 'cuda-toolkit' failed: the wheels of $req hold no bin/nvcc"
  # wheels carry no symlinks: the unversioned names the linker looks for, lib64, and nvcc.profile's targets/ dir
  for f in "$dir.tmp"/root/lib/lib*.so.*; do
    [ -e "$f" ] || continue
    local base; base="$(basename "$f")"
    [ -e "$dir.tmp/root/lib/${base%%.so.*}.so" ] || ln -s "$base" "$dir.tmp/root/lib/${base%%.so.*}.so"
  done
  [ -e "$dir.tmp/root/lib64" ] || ln -s lib "$dir.tmp/root/lib64"
  local target; target="$(uname -m | sed 's/^arm64$/aarch64/')-linux"
  [ "$target" != aarch64-linux ] || target=sbsa-linux
  mkdir -p "$dir.tmp/root/targets/$target"
  ln -sfn ../../include "$dir.tmp/root/targets/$target/include"; ln -sfn ../../lib "$dir.tmp/root/targets/$target/lib"
  printf '%s\n' "$stamp" >"$dir.tmp/root/.requirements-sha256"
  rm -rf "$dir"; mv "$dir.tmp/root" "$dir"; rm -rf "$dir.tmp"
  "$dir/bin/nvcc" --version >/dev/null || die "step 'cuda-toolkit' failed: $dir/bin/nvcc does not run"
  step "cuda: toolkit ready ($dir, $(du -sm "$dir" | cut -f1) MB)"
}

# A toolkit without cuBLAS (one put together from nvcc/runtime wheels by hand) and a machine without the NVIDIA
# driver's libcuda need two more things, kept in the cache: cuBLAS from the pinned wheel of the toolkit's major
# (cuda-extra), and a link-only libcuda stub (every cu* entry point of cuda.h returning CUDA_ERROR_STUB_LIBRARY;
# named libcuda.so, so at run time the loader still takes the driver's libcuda.so.1).
cuda_root() {
  if [ -n "${CUDA_HOME:-}" ]; then echo "$CUDA_HOME"; return; fi
  local nvcc; nvcc="$(command -v nvcc)"
  # a wrapper script (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) or a symlink into the toolkit
  local real; real="$(sed -n 's/^exec \(\/[^ ]*\/bin\/nvcc\).*/\1/p' "$nvcc" 2>/dev/null | head -1)"
  [ -n "$real" ] || real="$(readlink -f "$nvcc")"
  dirname "$(dirname "$real")"
}

# The pinned cuBLAS requirement (with its hashes) of scripts/cuda-wheels-<major>.txt.
cublas_requirement() {
  awk '/^nvidia-cublas/ { on = 1 } on { print } on && !/\\$/ { exit }' "$ROOT/scripts/cuda-wheels-$1.txt"
}

cuda_lib_dir() {  # the toolkit's directory holding libcudart
  local d
  for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT"/targets/*/lib; do
    if ls "$d"/libcudart.so* >/dev/null 2>&1; then echo "$d"; return; fi
  done
  echo "$CUDA_ROOT/lib64"
}

cuda_support_flags() {
  ensure_cuda_toolkit
  local root="$CUDA_ROOT" inc extra="$CACHE/cuda-extra" major
  inc="$root/include"
  [ -f "$inc/cuda.h" ] || die "step 'cuda' failed: no cuda.h under $inc (set CUDA_HOME to the toolkit)"
  major="$("$root/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)"
  local flags="-DCMAKE_CUDA_COMPILER=$root/bin/nvcc"
  if [ ! -f "$inc/cublas_v2.h" ]; then
    if [ ! -f "$extra/include/cublas_v2.h" ]; then
      local req="$extra.req.txt"
      cublas_requirement "$major" >"$req" 2>/dev/null || true
      [ -s "$req" ] || die "step 'cuda' failed: no pinned cuBLAS for CUDA $major (scripts/cuda-wheels-$major.txt)"
      step "cuda: fetching cuBLAS ($(head -1 "$req" | cut -d' ' -f1) from PyPI; the toolkit at $root has none)"
      rm -rf "$extra.tmp"; mkdir -p "$extra.tmp/wheel" "$extra.tmp/include" "$extra.tmp/lib"
      python3 -m pip install --quiet --no-deps --require-hashes --only-binary :all: --target "$extra.tmp/wheel" \
          -r "$req" || die "step 'cuda' failed: pip could not install cuBLAS"
      rm -f "$req"
      local h l
      h="$(find "$extra.tmp/wheel" -name cublas_v2.h | head -1)"; [ -n "$h" ] || die "step 'cuda' failed: no cublas_v2.h in the cuBLAS wheel"
      for l in "$(dirname "$h")"/*; do ln -s "${l/$extra.tmp/$extra}" "$extra.tmp/include/"; done
      for l in $(find "$extra.tmp/wheel" -name 'libcublas*.so.*'); do
        ln -s "${l/$extra.tmp/$extra}" "$extra.tmp/lib/$(basename "$l")"
        ln -sf "$(basename "$l")" "$extra.tmp/lib/$(basename "$l" | sed 's/\.so\..*/.so/')"
      done
      rm -rf "$extra"; mv "$extra.tmp" "$extra"
    fi
    flags="$flags -DCMAKE_CUDA_FLAGS=-I$extra/include -DCMAKE_CXX_FLAGS=-I$extra/include"
  fi
  local linkdirs=""
  [ -f "$inc/cublas_v2.h" ] || linkdirs="$extra/lib"
  if [ ! -e "$root/lib64/stubs/libcuda.so" ] && [ ! -e "$root/lib/stubs/libcuda.so" ] \
     && ! ldconfig -p 2>/dev/null | grep 'libcuda\.so ' >/dev/null; then
    # nothing to link libcuda against: the driver ships libcuda.so.1 only, and the wheels have no stubs/
    if [ ! -f "$extra/stub/libcuda.so" ]; then
      step "cuda: making a link-only libcuda stub (nothing to link libcuda against here)"
      mkdir -p "$extra/stub"
      echo '#include <cuda.h>' | cc -E -P -I"$inc" -x c - | grep -oE '\bcu[A-Za-z0-9_]+ *\(' | tr -d ' (' \
        | sort -u | awk '{ print "int " $1 "(void) { return 34; }" }' >"$extra/stub/libcuda_stub.c"
      cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$extra/stub/libcuda.so" "$extra/stub/libcuda_stub.c" \
        || die "step 'cuda' failed: could not build the libcuda stub"
    fi
    linkdirs="${linkdirs:+$linkdirs;}$extra/stub"
  fi
  [ -z "$linkdirs" ] || flags="$flags -DCMAKE_LIBRARY_PATH=$linkdirs"
  echo "$flags"
}

# What the cuda runner needs on its library path at run time (libcudart, cuBLAS): the toolkit's lib and, for a
# toolkit without cuBLAS, cuda-extra/lib. Only existing directories; ':'-separated.
cuda_library_path() {
  ensure_cuda_toolkit
  local dirs d out=""
  dirs="$(cuda_lib_dir)"
  [ -f "$CUDA_ROOT/include/cublas_v2.h" ] || dirs="$dirs:$CACHE/cuda-extra/lib"
  local IFS=:
  for d in $dirs; do [ -d "$d" ] && out="$out:$(cd "$d" && pwd)"; done
  echo "${out#:}"
}

# The GPU generations to compile for. By default this machine's GPUs (nvidia-smi's compute capability): a
# from-source build is for the machine it runs on, and each architecture costs as much compile time again.
# OLLAMA_PY_CUDA_ARCHITECTURES (or CMAKE_CUDA_ARCHITECTURES) overrides: a CMake list ("86;90", "native"), or
# "all" for packagers: Volta (70) to Blackwell (120), less those this nvcc no longer knows (CUDA 13 dropped
# everything before Turing, 75). Without a GPU (a packager's machine) it is "all" too.
cuda_archs() {
  local want="${OLLAMA_PY_CUDA_ARCHITECTURES:-${CMAKE_CUDA_ARCHITECTURES:-}}" own
  if [ -n "$want" ] && [ "$want" != all ]; then echo "$want"; return; fi
  if [ -z "$want" ]; then
    own="$(gpu_archs)"
    if [ -n "$own" ]; then echo "$own"; return; fi
  fi
  local have out="" a
  have=" $(nvcc --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | tr '\n' ' ') "
  for a in 70 75 80 86 89 90 100 120; do
    case "$have" in *" $a "*) out="$out;$a" ;; esac
  done
  echo "${out#;}" | grep . || echo "70;75;80;86;89;90"  # an nvcc that cannot list: CUDA 12's set
}

# One line on what the cuda variant is compiled for, and why.
cuda_archs_note() {
  local archs="$1" sm own
  sm="$(printf '%s' "$archs" | tr ';' '\n' | sed 's/^/sm_/' | paste -s -d ' ' -)"
  own="$(gpu_archs)"
  if [ -n "${OLLAMA_PY_CUDA_ARCHITECTURES:-${CMAKE_CUDA_ARCHITECTURES:-}}" ]; then
    echo "$sm (OLLAMA_PY_CUDA_ARCHITECTURES / CMAKE_CUDA_ARCHITECTURES)"
  elif [ -n "$own" ] && [ "$own" = "$archs" ]; then
    echo "$sm only: this machine's GPU(s), compute capability $(nvidia-smi --query-gpu=compute_cap \
--format=csv,noheader 2>/dev/null | tr -d ' \r' | sort -u | paste -s -d ',' -) (OLLAMA_PY_CUDA_ARCHITECTURES=all \
builds every architecture)"
  else
    echo "$sm (no NVIDIA GPU here)"
  fi
}

variant_flags() {
  local common="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_RPC=ON \
-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DGGML_BACKEND_DL=OFF"
  local x86_off="-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF \
-DGGML_AVX_VNNI=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BMI2=OFF -DGGML_SSE42=OFF"
  case "$1" in
    cpu) echo "$common $x86_off -DGGML_METAL=OFF" ;;
    cpu_avx2) echo "$common ${x86_off//-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF/-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON} -DGGML_SSE42=ON" | sed 's/-DGGML_SSE42=OFF//' ;;
    cuda) echo "$common -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$(cuda_archs) -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" ;;
    metal) echo "$common -DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON" ;;
    # AMD, Intel and NVIDIA GPUs through one backend; the CPU part as cpu_avx2 (x86) so partial offload is fast
    vulkan) if [ "$(uname -m)" = x86_64 ]; then variant_flags cpu_avx2 | sed 's/$/ -DGGML_VULKAN=ON/'
            else echo "$common -DGGML_VULKAN=ON"; fi ;;
    *) die "unknown variant '$1' (known: cpu cpu_avx2 vulkan cuda metal)" ;;
  esac
}

fetch_source() {
  if [ -n "${LLAMA_CPP_SRC:-}" ]; then
    [ -f "$LLAMA_CPP_SRC/CMakeLists.txt" ] || die "LLAMA_CPP_SRC=$LLAMA_CPP_SRC is not a llama.cpp checkout"
    SRC="$(cd "$LLAMA_CPP_SRC" && pwd)"; SRC_ID="dir-$(cd "$SRC" && (git rev-parse HEAD 2>/dev/null || echo local))"
    SRC_VERSION="local"; return
  fi
  if [ -n "${LLAMA_CPP_GIT:-}" ]; then
    need git source "apt-get install git"
    local ref="${LLAMA_CPP_REF:?set LLAMA_CPP_REF to a tag with LLAMA_CPP_GIT}"
    SRC="$CACHE/src/git-$ref"
    [ -d "$SRC" ] || { step "cloning $LLAMA_CPP_GIT at $ref"; git clone --depth 1 --branch "$ref" "$LLAMA_CPP_GIT" "$SRC.tmp" && mv "$SRC.tmp" "$SRC"; }
    SRC_ID="git-$(cd "$SRC" && git rev-parse HEAD)"; SRC_VERSION="$ref"; return
  fi
  local dir="$CACHE/src" tarball="$CACHE/src/llama_cpp_python-$SDIST_VERSION.tar.gz"
  mkdir -p "$dir"
  if [ ! -f "$tarball" ]; then
    step "source: downloading llama-cpp-python==$SDIST_VERSION sdist from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-python==$SDIST_VERSION" -d "$dir.dl" 2>/dev/null \
      || python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$SDIST_VERSION" -d "$dir.dl" \
      || die "step 'source' failed: pip could not download llama-cpp-python==$SDIST_VERSION"
    mv "$dir.dl/llama_cpp_python-$SDIST_VERSION.tar.gz" "$tarball"; rm -rf "$dir.dl"
  fi
  local got; got="$( (sha256sum "$tarball" 2>/dev/null || shasum -a 256 "$tarball") | cut -d' ' -f1)"
  if [ "$got" != "$SDIST_SHA256" ]; then
    die "step 'source' failed: $tarball has sha256 $got, expected $SDIST_SHA256; delete it and retry"
  fi
  SRC="$dir/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp"
  if [ ! -f "$SRC/.extracted" ]; then
    step "source: extracting vendor/llama.cpp"
    rm -rf "$dir/llama_cpp_python-$SDIST_VERSION"
    tar -xzf "$tarball" -C "$dir"
    touch "$SRC/.extracted"
  fi
  SRC_ID="sdist-$SDIST_SHA256"; SRC_VERSION="llama-cpp-python-$SDIST_VERSION"
}

build_variant() {
  local variant="$1" flags key bdir out
  flags="$(variant_flags "$variant" | tr -s ' ')"
  key="$(printf '%s\n%s\n' "$SRC_ID" "$flags" | (sha256sum 2>/dev/null || shasum -a 256) | cut -c1-16)"
  out="$RUNNERS/$variant"
  if [ -f "$out/build-info.json" ] && grep -q "\"key\": \"$key\"" "$out/build-info.json" \
     && [ -x "$out/llama-server" ]; then
    step "$variant: up to date ($out)"
    if [ "$variant" = cuda ]; then write_library_path "$out/build-info.json" "$(cuda_library_path)"; fi
    return
  fi
  bdir="$CACHE/build/$variant-$key"
  local launcher=""
  if command -v ccache >/dev/null 2>&1; then
    launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  fi
  if [ ! -x "$bdir/bin/llama-server" ] || [ ! -f "$bdir/.done" ]; then
    local extra=""
    if [ "$variant" = cuda ]; then
      extra="$(cuda_support_flags)"
      step "cuda: compiling for $(cuda_archs_note "$(cuda_archs)")"
    fi
    if [ "$variant" = vulkan ]; then
      vulkan_buildable || die "variant vulkan needs glslc and the Vulkan loader's development files \
(Debian: apt-get install libvulkan-dev glslc spirv-headers)"
      extra="-DVulkan_INCLUDE_DIR=$(vulkan_include_dir)"
    fi
    step "$variant: configure ($bdir)"
    # shellcheck disable=SC2086
    cmake -S "$SRC" -B "$bdir" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
      $flags $extra $launcher >"$bdir.configure.log" 2>&1 \
      || { tail -30 "$bdir.configure.log" >&2; die "step 'configure' of $variant failed (log: $bdir.configure.log)"; }
    step "$variant: compile ${TARGETS[*]} with $JOBS jobs"
    cmake --build "$bdir" --config Release -j "$JOBS" --target "${TARGETS[@]}" 2>&1 \
      | tee "$bdir.build.log" | grep --line-buffered -E '^\[[0-9]+/[0-9]+\]|error' \
      | awk '{ printf "\r  %s", substr($0, 1, 100); fflush() } END { print "" }' >&2
    [ "${PIPESTATUS[0]}" -eq 0 ] && [ -x "$bdir/bin/llama-server" ] \
      || { tail -40 "$bdir.build.log" >&2; die "step 'compile' of $variant failed (log: $bdir.build.log)"; }
    touch "$bdir/.done"
  fi
  step "$variant: install into $out"
  local tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  for t in "${TARGETS[@]}"; do cp "$bdir/bin/$t" "$tmp/"; done
  ln -sf ggml-rpc-server "$tmp/rpc-server"
  local commit version
  version="$("$tmp/llama-server" --version 2>&1 | grep -m1 -i version || true)"
  commit="$(printf '%s' "$version" | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p')"
  python3 - "$tmp/build-info.json" "$variant" "$key" "$flags" "$SRC_ID" "$SRC_VERSION" "$version" "$commit" <<'PY'
import json, sys, time
path, variant, key, flags, src, srcver, version, commit = sys.argv[1:]
json.dump({"variant": variant, "key": key, "cmake_flags": flags.split(), "source": src,
           "source_version": srcver, "llama_cpp_version": version.strip(), "commit": commit,
           "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
          open(path, "w"), indent=1)
PY
  if [ "$variant" = cuda ]; then
    local libs; libs="$(cuda_library_path)"
    write_library_path "$tmp/build-info.json" "$libs"
    local missing
    missing="$(LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$tmp/llama-server" 2>/dev/null \
      | sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p' | grep -v '^libcuda\.so' | paste -s -d ' ' - || true)"
    [ -z "$missing" ] || die "step 'install' of cuda failed: llama-server cannot find $missing (library path: $libs)"
    step "cuda: llama-server finds libcudart and cuBLAS in $libs (build-info.json \"library_path\", put on \
LD_LIBRARY_PATH by ollama-py)"
  fi
  rm -rf "$out"; mv "$tmp" "$out"
  step "$variant: done ($(cd "$out" && ls | tr '\n' ' '))"
}

# build-info.json's "library_path": the directories ollama-py prepends to LD_LIBRARY_PATH for this runner.
write_library_path() {
  python3 - "$1" "$2" <<'PY2'
import json, sys
path, dirs = sys.argv[1], [d for d in sys.argv[2].split(":") if d]
info = json.load(open(path))
info["library_path"] = dirs
json.dump(info, open(path, "w"), indent=1)
PY2
}

# The Hugging Face -> GGUF converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py, their conversion/ package
# and gguf-py) copied next to the runners from the same source as the binaries: a converted model then has
# exactly the tensor names and metadata these runners load, and ollama-py finds the converter where it finds
# llama-quantize (OLLAMA_RUNNERS_DIR/convert), with no cache lookup at run time. Plain Python, nothing to build;
# convert_*.py put their own gguf-py first on sys.path (the gguf wheel installed with ollama-py may be older).
install_converter() {
  local out="$RUNNERS/convert" tmp
  if [ -f "$out/source-id" ] && [ "$(cat "$out/source-id")" = "$SRC_ID" ] && [ -f "$out/convert_hf_to_gguf.py" ]; then
    step "convert: up to date ($out)"; return
  fi
  [ -f "$SRC/convert_hf_to_gguf.py" ] && [ -d "$SRC/gguf-py/gguf" ] || die "step 'convert' failed: $SRC has no convert_hf_to_gguf.py and gguf-py"
  tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp/gguf-py"
  cp "$SRC/convert_hf_to_gguf.py" "$SRC/convert_lora_to_gguf.py" "$tmp/"
  if [ -d "$SRC/conversion" ]; then cp -R "$SRC/conversion" "$tmp/"; fi
  cp -R "$SRC/gguf-py/gguf" "$tmp/gguf-py/"
  find "$tmp" -name __pycache__ -type d -prune -exec rm -rf {} +
  printf '%s\n' "$SRC_ID" >"$tmp/source-id"
  rm -rf "$out"; mv "$tmp" "$out"
  step "convert: done ($out)"
}

check_cuda() {
  ensure_cuda_toolkit
  fetch_source
  # this machine's GPU architectures, else sm_90 (one architecture keeps the check to seconds)
  local arch="${OLLAMA_PY_CUDA_ARCHITECTURES:-${CMAKE_CUDA_ARCHITECTURES:-}}" flags key bdir
  [ -n "$arch" ] && [ "$arch" != all ] || arch="$(gpu_archs)"
  [ -n "$arch" ] || arch=90
  flags="$(OLLAMA_PY_CUDA_ARCHITECTURES=$arch variant_flags cuda | tr -s ' ')"
  local obj=ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/ggml-cuda.cu.o gen="${CMAKE_GENERATOR:-}"
  if [ -z "$gen" ]; then gen="Unix Makefiles"; if command -v ninja >/dev/null 2>&1; then gen=Ninja; fi; fi
  key="$(printf '%s\n%s\n%s\n%s\n' "$SRC_ID" "$flags" "$CUDA_ROOT" "$gen" | (sha256sum 2>/dev/null || shasum -a 256) \
    | cut -c1-16)"
  bdir="$CACHE/build/cuda-check-$key"
  if [ ! -f "$bdir/$obj" ]; then
    local extra; extra="$(cuda_support_flags)"
    step "cuda: configure for $(cuda_archs_note "$arch") ($bdir)"
    # shellcheck disable=SC2086
    cmake -S "$SRC" -B "$bdir" -G "$gen" $flags $extra >"$bdir.configure.log" 2>&1 \
      || { tail -30 "$bdir.configure.log" >&2; die "step 'check-cuda' failed: configure (log: $bdir.configure.log)"; }
    step "cuda: compile the CUDA backend object (ggml-cuda.cu) with $CUDA_ROOT/bin/nvcc"
    if [ -f "$bdir/build.ninja" ]; then ninja -C "$bdir" "$obj"; else make -C "$bdir/ggml/src/ggml-cuda" ggml-cuda.cu.o; fi \
      >"$bdir.build.log" 2>&1 \
      || { tail -30 "$bdir.build.log" >&2; die "step 'check-cuda' failed: compile (log: $bdir.build.log)"; }
  fi
  # the architectures nvcc really compiled for, read from its command line
  local built
  if [ -f "$bdir/build.ninja" ]; then built="$(ninja -C "$bdir" -t commands "$obj" | tail -1)"
  else built="$(cat "$bdir/ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/flags.make")"; fi
  built="$(printf '%s' "$built" | grep -oE 'sm_[0-9]+[a-z]?' | sort -u | paste -s -d ' ' -)"
  step "cuda: compiles for $built only ($bdir/$obj, $(du -k "$bdir/$obj" | cut -f1) KB, nvcc $CUDA_ROOT/bin/nvcc)"
}

main() {
  if [ "${1:-}" = --check-cuda ]; then check_cuda; return; fi
  if [ "${1:-}" = --cuda-archs ]; then
    if [ "${OLLAMA_PY_CUDA_ARCHITECTURES:-${CMAKE_CUDA_ARCHITECTURES:-}}" = all ]; then
      ensure_cuda_toolkit >/dev/null 2>&1 || true  # every architecture nvcc knows: ask nvcc
    fi
    local archs; archs="$(cuda_archs)"
    echo "$archs"; echo "cuda: compiling for $(cuda_archs_note "$archs")" >&2; return
  fi
  local variants=("$@")
  if [ "${1:-}" = --this-host ]; then
    variants=("$(this_host_variant)")
    step "this host runs the ${variants[0]} variant: building it first (every other variant: make runners)"
  fi
  if [ "${1:-}" = --this-host ] || [ $# -eq 0 ]; then
    local why=""
    if nvidia_gpus_present; then why="$(cuda_unbuildable)"; fi
    [ -z "$why" ] || printf 'build_runners: no cuda variant: %s\n' "$why" >&2
  fi
  [ ${#variants[@]} -gt 0 ] || read -r -a variants <<<"$(host_variants)"
  local v
  for v in "${variants[@]}"; do
    if [ "$v" = cuda ]; then ensure_cuda_toolkit; fi  # nvcc on PATH before its architectures are listed
    variant_flags "$v" >/dev/null
  done
  fetch_source
  mkdir -p "$RUNNERS" "$CACHE/build"
  for v in "${variants[@]}"; do build_variant "$v"; done
  install_converter
}
main "$@"
