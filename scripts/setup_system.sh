#!/usr/bin/env bash
# Install the system packages a purpose needs, when this user may (root, or sudo without a password);
# otherwise stop before anything runs and print the one command that installs them.
#
# Usage: scripts/setup_system.sh build|test
#   build  what `make run` needs: a C++ compiler, CMake, Python's venv (+ ccache to make rebuilds fast)
#   test   build's packages + what the tests start: Debian's docker-registry and htpasswd (push/pull tests),
#          chromium (the web console's browser tests, driven by Playwright),
#          the Vulkan build tools and Mesa's software Vulkan device (GPU offload tests),
#          Node.js and npm (scripts/fetch_agents.sh installs Claude Code and Codex CLI for the coding-agent tests)
#
# Debian/Ubuntu only (apt-get); elsewhere it checks and names what is missing. Prints nothing when all is there.
set -euo pipefail
purpose="${1:-build}"
py="${PYTHON:-python3}"

# command -> Debian package
declare -a want=()
have() { command -v "$1" >/dev/null 2>&1; }
have cmake || want+=(cmake)
{ have c++ || have g++ || have clang++; } || want+=(g++)
have ccache || want+=(ccache)
"$py" -c 'import venv, ensurepip' 2>/dev/null || want+=(python3-venv)
if [ "$purpose" = test ]; then
  have docker-registry || [ -x /usr/bin/docker-registry ] || want+=(docker-registry)
  have htpasswd || want+=(apache2-utils)
  have chromium || [ -x /usr/bin/chromium ] || want+=(chromium)  # the web console's browser tests
  # the vulkan runner and a software Vulkan device (Mesa's lavapipe) for the GPU offload tests
  [ -f /usr/include/vulkan/vulkan.h ] || want+=(libvulkan-dev)
  have glslc || want+=(glslc)
  [ -d /usr/include/spirv ] || want+=(spirv-headers)
  ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || want+=(mesa-vulkan-drivers)
  have node || want+=(nodejs)  # the coding agents' npm packages (Codex CLI's launcher is a node script)
  have npm || want+=(npm)
fi
[ ${#want[@]} -eq 0 ] && exit 0

if ! have apt-get; then
  echo "setup: missing ${want[*]} (not a Debian/Ubuntu system: install them with your package manager)" >&2
  [ "${want[*]}" = ccache ] && exit 0  # ccache only makes rebuilds faster
  exit 1
fi

if [ "$(id -u)" -eq 0 ]; then SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then SUDO=(sudo -n)
else
  echo "setup: these Debian packages are needed and this user cannot install them; run:" >&2
  echo "  sudo apt-get install -y ${want[*]}" >&2
  exit 1
fi
echo "==> installing Debian packages: ${want[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null 2>&1; then
  # a fresh machine has no package lists yet
  "${SUDO[@]}" apt-get update -qq >/dev/null
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi
