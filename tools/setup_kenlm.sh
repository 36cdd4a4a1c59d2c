# KenLM's lmplz/build_binary for tools/train_ngram_lm.py, into $VENV/bin. Sourced by tools/setup.sh (after
# tools/setup_apt.sh, whose install_kenlm_debs fetches the compiler and Boost), and by tests/test_setup_kenlm.py,
# which runs build_kenlm_tools with a fake pip and cmake.
#
# Environment: VENV (the virtual environment, with bin/python); XDG_CACHE_HOME (default ~/.cache) holds the cache;
# OS_RELEASE (default /etc/os-release) names the system in the cache's key.

# lmplz/build_binary (modified Kneser-Ney n-gram estimation) are not packaged by Debian; the PyPI sdist of kenlm
# carries their sources, so they are compiled. The compiled pair is kept in the user's cache too (like pip's wheels), keyed by version, machine and OS
# release, so a second clone or a rebuilt .venv copies it instead of compiling for minutes again.
KENLM_VERSION=0.3.0
os_release=$(. "${OS_RELEASE:-/etc/os-release}" 2>/dev/null; echo "${ID:-linux}${VERSION_ID:-}")
KENLM_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/duet/kenlm-$KENLM_VERSION-order6-$(uname -m)-$os_release"
kenlm_tools_run() {  # the loader's 127 means a shared library (Boost) is missing: the binaries cannot run here
  local bin rc
  for bin in "$1/lmplz" "$1/build_binary"; do
    [ -x "$bin" ] || return 1
    rc=0; "$bin" --help >/dev/null 2>&1 || rc=$?
    [ "$rc" -ne 127 ] || return 1
  done
}
build_kenlm_tools() {
  [ -x "$VENV/bin/lmplz" ] && [ -x "$VENV/bin/build_binary" ] && return 0
  install_kenlm_debs || return 0
  if kenlm_tools_run "$KENLM_CACHE"; then
    echo "setup: KenLM lmplz + build_binary $KENLM_VERSION copied from $KENLM_CACHE (compiled by an earlier setup)"
    cp "$KENLM_CACHE/lmplz" "$KENLM_CACHE/build_binary" "$VENV/bin/"
    return 0
  fi
  echo "setup: compiling KenLM lmplz + build_binary $KENLM_VERSION into $VENV/bin (a few minutes, once)"
  kenlm_tmp=$(mktemp -d)
  if "$VENV/bin/python" -m pip download -q --no-deps --no-binary kenlm "kenlm==$KENLM_VERSION" -d "$kenlm_tmp" \
     && tar -xzf "$kenlm_tmp/kenlm-$KENLM_VERSION.tar.gz" -C "$kenlm_tmp" \
     && cmake -S "$kenlm_tmp/kenlm-$KENLM_VERSION" -B "$kenlm_tmp/build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 >"$kenlm_tmp/cmake.log" 2>&1 \
     && cmake --build "$kenlm_tmp/build" --target lmplz build_binary -j "$(nproc)" >"$kenlm_tmp/build.log" 2>&1; then
    cp "$kenlm_tmp/build/bin/lmplz" "$kenlm_tmp/build/bin/build_binary" "$VENV/bin/"
    # best effort: a read-only or full home only means the next setup compiles again
    mkdir -p "$KENLM_CACHE" 2>/dev/null \
      && cp "$kenlm_tmp/build/bin/lmplz" "$kenlm_tmp/build/bin/build_binary" "$KENLM_CACHE/" 2>/dev/null || true
  else
    echo "setup: note: KenLM build failed (logs kept in $kenlm_tmp); n-gram LMs (tools/train_ngram_lm.py) unavailable" >&2
    return 0
  fi
  rm -rf "$kenlm_tmp"
}
