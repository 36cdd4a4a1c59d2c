# KenLM's lmplz/build_binary for tools/train_ngram_lm.py, into $VENV/bin. Sourced by tools/setup.sh (after
# tools/setup_apt.sh, whose install_kenlm_debs fetches the compiler and Boost), and by tests/test_setup_kenlm.py,
# which runs build_kenlm_tools with a fake pip and cmake.
#
# Environment: VENV (the virtual environment, with bin/python); XDG_CACHE_HOME (default ~/.cache) holds the
# cache; OS_RELEASE (default /etc/os-release) names the system in the cache's key.

# lmplz/build_binary (modified Kneser-Ney n-gram estimation) are not packaged by Debian; the PyPI sdist of kenlm
# carries their sources, so they are compiled. The compiled pair is kept in the user's cache too (like pip's
# wheels), keyed by version, machine and OS release, so a second clone or a rebuilt .venv copies it instead of
# compiling for minutes again.
KENLM_VERSION=0.3.0
KENLM_MAX_ORDER=6   # the highest n-gram order lmplz can build (the demo's token LM is a 6-gram)
KENLM_TOOLS="lmplz build_binary"
os_release=$(. "${OS_RELEASE:-/etc/os-release}" 2>/dev/null; echo "${ID:-linux}${VERSION_ID:-}")
# ~ (expanded unquoted) rather than $HOME, which set -u refuses where it is unset (env -i)
cache_root=${XDG_CACHE_HOME:-~/.cache}
KENLM_CACHE="$cache_root/duet/kenlm-$KENLM_VERSION-order$KENLM_MAX_ORDER-$(uname -m)-$os_release"

# kenlm_tools_run DIR: DIR holds both tools and they run here. Their --help exits 1 (0 would do too); anything
# else -- the loader's 127 for a missing Boost library, 126 for a truncated file, a crash -- means they cannot.
kenlm_tools_run() {
  local tool rc
  for tool in $KENLM_TOOLS; do
    [ -x "$1/$tool" ] || return 1
    rc=0; "$1/$tool" --help >/dev/null 2>&1 </dev/null || rc=$?
    [ "$rc" -le 1 ] || return 1
  done
}

# copy_kenlm_tools FROM TO: both tools, each written under a temporary name and renamed, so that an interrupted
# copy never leaves a truncated tool that looks installed
copy_kenlm_tools() {
  local tool
  mkdir -p "$2" || return 1
  for tool in $KENLM_TOOLS; do
    cp "$1/$tool" "$2/.$tool.partial" && mv -f "$2/.$tool.partial" "$2/$tool" || return 1
  done
}

build_kenlm_tools() {
  kenlm_tools_run "$VENV/bin" && return 0
  # the cached pair needs no compiler, only Boost's run-time libraries (if they are gone it does not run)
  if kenlm_tools_run "$KENLM_CACHE"; then
    echo "setup: KenLM lmplz + build_binary $KENLM_VERSION copied from $KENLM_CACHE (compiled by an earlier setup)"
    copy_kenlm_tools "$KENLM_CACHE" "$VENV/bin" && return 0
  fi
  install_kenlm_debs || return 0
  echo "setup: compiling KenLM lmplz + build_binary $KENLM_VERSION into $VENV/bin (a few minutes, once)"
  kenlm_tmp=$(mktemp -d)
  if "$VENV/bin/python" -m pip download -q --no-deps --no-binary kenlm "kenlm==$KENLM_VERSION" -d "$kenlm_tmp" \
     && tar -xzf "$kenlm_tmp/kenlm-$KENLM_VERSION.tar.gz" -C "$kenlm_tmp" \
     && cmake -S "$kenlm_tmp/kenlm-$KENLM_VERSION" -B "$kenlm_tmp/build" -DCMAKE_BUILD_TYPE=Release \
          -DKENLM_MAX_ORDER=$KENLM_MAX_ORDER >"$kenlm_tmp/cmake.log" 2>&1 \
     && cmake --build "$kenlm_tmp/build" --target $KENLM_TOOLS -j "$(nproc)" >"$kenlm_tmp/build.log" 2>&1 \
     && copy_kenlm_tools "$kenlm_tmp/build/bin" "$VENV/bin"; then
    # best effort: a read-only or full home only means the next setup compiles again
    copy_kenlm_tools "$kenlm_tmp/build/bin" "$KENLM_CACHE" 2>/dev/null || true
  else
    echo "setup: note: KenLM build failed (logs kept in $kenlm_tmp); n-gram LMs (tools/train_ngram_lm.py)" \
         "unavailable" >&2
    return 0
  fi
  rm -rf "$kenlm_tmp"
}
