#!/usr/bin/env bash
# Say which system prerequisite is missing and how to get it.
set -u
missing=0
hint_apt() { if command -v apt-get >/dev/null; then echo "sudo apt-get install $1"; else echo "brew install $2"; fi; }
py="${PYTHON:-python3}"
if ! command -v "$py" >/dev/null || ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "missing: Python >= 3.11 ($(hint_apt 'python3 python3-venv' python@3.12))" >&2; missing=1
elif ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "missing: Python venv support ($(hint_apt python3-venv python@3.12))" >&2; missing=1
fi
if ! command -v cmake >/dev/null; then echo "missing: CMake ($(hint_apt cmake cmake))" >&2; missing=1; fi
if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null && ! command -v clang++ >/dev/null; then
  echo "missing: a C++ compiler ($(hint_apt g++ 'xcode-select --install'))" >&2; missing=1
fi
if ! command -v docker-registry >/dev/null || ! command -v htpasswd >/dev/null; then
  echo "note: the push/pull tests need Debian's docker-registry and htpasswd ($(hint_apt 'docker-registry apache2-utils' 'distribution httpd'))" >&2
fi
if ! command -v ccache >/dev/null; then echo "note: ccache makes rebuilds faster ($(hint_apt ccache ccache))" >&2; fi
exit $missing
