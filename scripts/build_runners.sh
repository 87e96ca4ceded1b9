#!/usr/bin/env bash
# Build upstream llama.cpp (llama-server, llama-quantize, ggml-rpc-server) per variant into runners/<variant>/.
#
# Usage: scripts/build_runners.sh [VARIANT...]      VARIANT: cpu cpu_avx2 vulkan cuda metal
#        scripts/build_runners.sh --check-cuda      configure the cuda variant and compile its backend object
#                                                  (ggml-cuda.cu, one architecture): proves the CUDA build on a
#                                                  machine with nvcc and no GPU, in seconds instead of 40 minutes
#   no argument: every variant this host can build and run (vulkan: when glslc and the Vulkan loader's
#   development files are installed, e.g. Debian's libvulkan-dev glslc spirv-headers).
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
  if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    v="$v cuda"
  fi
  echo "$v"
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

# A CUDA toolkit put together from PyPI wheels (nvidia-cuda-nvcc, -runtime, ...) has no cuBLAS, and a machine
# without the NVIDIA driver has no libcuda to link against. cuda_support_flags fills both gaps in the cache:
# cuBLAS from PyPI's nvidia-cublas wheel of the toolkit's major version, and a link-only libcuda stub (every
# cu* entry point of cuda.h returning CUDA_ERROR_STUB_LIBRARY; at run time the real driver's libcuda.so.1 wins).
cuda_root() {
  if [ -n "${CUDA_HOME:-}" ]; then echo "$CUDA_HOME"; return; fi
  local nvcc; nvcc="$(command -v nvcc)"
  # a wrapper script (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`) or a symlink into the toolkit
  local real; real="$(sed -n 's/^exec \(\/[^ ]*\/bin\/nvcc\).*/\1/p' "$nvcc" 2>/dev/null | head -1)"
  [ -n "$real" ] || real="$(readlink -f "$nvcc")"
  dirname "$(dirname "$real")"
}

cuda_support_flags() {
  local root inc extra="$CACHE/cuda-extra" major
  root="$(cuda_root)"; inc="$root/include"
  [ -f "$inc/cuda.h" ] || die "step 'cuda' failed: no cuda.h under $inc (set CUDA_HOME to the toolkit)"
  major="$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)"
  local flags=""
  if [ ! -f "$inc/cublas_v2.h" ]; then
    if [ ! -f "$extra/include/cublas_v2.h" ]; then
      local pkg="nvidia-cublas-cu$major"; [ "$major" -ge 13 ] && pkg="nvidia-cublas==$major.*"
      step "cuda: fetching cuBLAS ($pkg from PyPI; the toolkit at $root has none)"
      rm -rf "$extra.tmp"; mkdir -p "$extra.tmp/wheel" "$extra.tmp/include" "$extra.tmp/lib"
      python3 -m pip install --quiet --no-deps --target "$extra.tmp/wheel" "$pkg" \
        || die "step 'cuda' failed: pip could not install $pkg"
      local h l
      h="$(find "$extra.tmp/wheel" -name cublas_v2.h | head -1)"; [ -n "$h" ] || die "step 'cuda' failed: $pkg has no cublas_v2.h"
      for l in "$(dirname "$h")"/*; do ln -s "${l/$extra.tmp/$extra}" "$extra.tmp/include/"; done
      for l in $(find "$extra.tmp/wheel" -name 'libcublas*.so.*'); do
        ln -s "${l/$extra.tmp/$extra}" "$extra.tmp/lib/$(basename "$l")"
        ln -sf "$(basename "$l")" "$extra.tmp/lib/$(basename "$l" | sed 's/\.so\..*/.so/')"
      done
      rm -rf "$extra"; mv "$extra.tmp" "$extra"
    fi
    flags="-DCMAKE_CUDA_FLAGS=-I$extra/include -DCMAKE_CXX_FLAGS=-I$extra/include"
  fi
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' && [ ! -e "$root/lib64/stubs/libcuda.so" ]; then
    if [ ! -f "$extra/lib/libcuda.so" ]; then
      step "cuda: making a link-only libcuda stub (no NVIDIA driver on this machine)"
      mkdir -p "$extra/lib"
      echo '#include <cuda.h>' | cc -E -P -I"$inc" -x c - | grep -oE '\bcu[A-Za-z0-9_]+ *\(' | tr -d ' (' \
        | sort -u | awk '{ print "int " $1 "(void) { return 34; }" }' >"$extra/libcuda_stub.c"
      cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$extra/lib/libcuda.so" "$extra/libcuda_stub.c" \
        || die "step 'cuda' failed: could not build the libcuda stub"
    fi
  fi
  [ -d "$extra/lib" ] && flags="$flags -DCMAKE_LIBRARY_PATH=$extra/lib"
  echo "$flags"
}

# The GPU generations to compile for: Volta (70) to Blackwell (120), less those this nvcc no longer knows
# (CUDA 13 dropped everything before Turing, 75). CMAKE_CUDA_ARCHITECTURES overrides, e.g. "90" for H100 only.
cuda_archs() {
  if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then echo "$CMAKE_CUDA_ARCHITECTURES"; return; fi
  local have out="" a
  have=" $(nvcc --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | tr '\n' ' ') "
  for a in 70 75 80 86 89 90 100 120; do
    case "$have" in *" $a "*) out="$out;$a" ;; esac
  done
  echo "${out#;}" | grep . || echo "70;75;80;86;89;90"  # an nvcc that cannot list: CUDA 12's set
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
    step "$variant: up to date ($out)"; return
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
  rm -rf "$out"; mv "$tmp" "$out"
  step "$variant: done ($(cd "$out" && ls | tr '\n' ' '))"
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
  need nvcc check-cuda "a CUDA toolkit (nvcc) is needed"
  fetch_source
  local arch="${CMAKE_CUDA_ARCHITECTURES:-90}" flags key bdir
  flags="$(CMAKE_CUDA_ARCHITECTURES=$arch variant_flags cuda | tr -s ' ')"
  key="$(printf '%s\n%s\n' "$SRC_ID" "$flags" | (sha256sum 2>/dev/null || shasum -a 256) | cut -c1-16)"
  bdir="$CACHE/build/cuda-check-$key"
  local obj=ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/ggml-cuda.cu.o
  if [ -f "$bdir/$obj" ]; then step "cuda: compiles (cached: $bdir/$obj)"; return; fi
  local extra; extra="$(cuda_support_flags)"
  step "cuda: configure for sm_$arch ($bdir)"
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$bdir" -G Ninja $flags $extra >"$bdir.configure.log" 2>&1 \
    || { tail -30 "$bdir.configure.log" >&2; die "step 'check-cuda' failed: configure (log: $bdir.configure.log)"; }
  step "cuda: compile the CUDA backend object (ggml-cuda.cu, sm_$arch)"
  ninja -C "$bdir" "$obj" >"$bdir.build.log" 2>&1 \
    || { tail -30 "$bdir.build.log" >&2; die "step 'check-cuda' failed: compile (log: $bdir.build.log)"; }
  step "cuda: compiles ($bdir/$obj, $(du -k "$bdir/$obj" | cut -f1) KB)"
}

main() {
  if [ "${1:-}" = --check-cuda ]; then check_cuda; return; fi
  local variants=("$@")
  [ ${#variants[@]} -gt 0 ] || read -r -a variants <<<"$(host_variants)"
  for v in "${variants[@]}"; do variant_flags "$v" >/dev/null; done
  fetch_source
  mkdir -p "$RUNNERS" "$CACHE/build"
  for v in "${variants[@]}"; do build_variant "$v"; done
  install_converter
}
main "$@"
