#!/usr/bin/env bash
# Usage: bash tools/setup.sh
#
# Creates .venv/ with duet and everything it needs; safe to re-run (seconds when nothing changed).
#   1. Debian/Ubuntu packages for the synthetic corpus and `pipeline.py --speak` (sox, espeak-ng, flite,
#      festival + English voices, WordNet's example sentences) and tools/serve.py (ffmpeg for WebM uploads;
#      chromium + chromium-driver, apart, for its page's browser test) when apt-get is usable; otherwise a note and
#      carry on (the bundled samples/ need none of them). The other English voices of the generalisation
#      pool (mbrola us1/us2/us3/en1, RHVoice, SVOX pico) live in Debian's contrib/non-free components:
#      they are fetched through a private apt list (the system's sources stay as they are), best effort.
#   2. torch==2.13.0 before anything else: on a machine without a GPU pip would otherwise pull a
#      multi-GB CUDA build as a dependency of NeMo. (On a Linux box with a GPU the same pin is CUDA.)
#   3. KenLM's lmplz/build_binary compiled from the kenlm sdist into .venv/bin (Boost from Debian).
#   4. `pip install -e .[dev]`: NeMo 3.0.0 (ASR), transformers, datasets, ... pinned in pyproject.toml.
#   5. GPT-2's own vocab.json + merges.txt (from the openai-whisper==20230124 sdist on PyPI) into
#      .venv/share/gpt2-tokenizer, for the tests that check the template and collator on the real tokenizer.
# Environment: PYTHON=python3.11 picks the interpreter (3.10-3.12); DUET_SKIP_APT=1 skips step 1.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
SYSTEM_PACKAGES="sox libsox-fmt-all flac espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts festvox-rablpc16k festvox-don wordnet-base ffmpeg"
# the page's browser test (tests/test_server_browser.py); installed apart, since on Ubuntu chromium is a snap
# wrapper that may not install, and that must not keep the packages above out
BROWSER_PACKAGES="chromium chromium-driver"
# contrib/non-free voices (duet/synth/voices.py); mbrola's voices are free for non-commercial use only
EXTRA_VOICE_PACKAGES="mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 rhvoice rhvoice-english libttspico-utils"
STAMP="$VENV/.duet-setup"
want_stamp=$(cat pyproject.toml tools/setup.sh | sha256sum | cut -d' ' -f1)

install_system_packages() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  missing=""
  for cmd in sox espeak-ng flite text2wave ffmpeg; do command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"; done
  [ -f /usr/share/wordnet/data.noun ] || missing="$missing wordnet"
  [ -z "$missing" ] && return 0
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo -n"
    echo "setup: installing system packages ($SYSTEM_PACKAGES)"
    if $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $SYSTEM_PACKAGES >/dev/null; then
      return 0
    fi
  fi
  echo "setup: note: could not install$missing (needs apt-get as root or passwordless sudo)." >&2
  echo "setup: note: only tools/make_sample_corpus.py, 'pipeline.py --speak', MP3/WebM uploads to tools/serve.py and its browser test need them; install them with your package manager." >&2
}

install_system_packages

install_browser() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || return 0
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo -n"
  echo "setup: installing $BROWSER_PACKAGES (the server page's browser test)"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        $BROWSER_PACKAGES >/dev/null; }; then
    echo "setup: note: could not install $BROWSER_PACKAGES; the browser test skips" >&2
  fi
}
install_browser

# The contrib/non-free voices through a private source list and state folder: nothing of the system's apt
# configuration changes. Debian only (the suite name comes from /etc/os-release).
install_extra_voices() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  command -v RHVoice-test >/dev/null 2>&1 && command -v pico2wave >/dev/null 2>&1 && [ -d /usr/share/mbrola/us1 ] && return 0
  command -v apt-get >/dev/null 2>&1 && [ -r /etc/os-release ] || return 0
  . /etc/os-release
  [ "${ID:-}" = debian ] && [ -n "${VERSION_CODENAME:-}" ] || return 0
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo -n"
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial"
  echo "deb http://deb.debian.org/debian $VERSION_CODENAME main contrib non-free" > "$apt_dir/sources.list"
  apt_opts="-oDir::Etc::SourceList=$apt_dir/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$apt_dir/lists"
  echo "setup: installing the contrib/non-free TTS voices ($EXTRA_VOICE_PACKAGES)"
  if ! { $SUDO apt-get $apt_opts update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $apt_opts install -y -qq \
        --no-install-recommends $EXTRA_VOICE_PACKAGES >/dev/null; }; then
    echo "setup: note: could not install the mbrola/RHVoice/pico voices; corpora skip their speakers" >&2
  fi
  rm -rf "$apt_dir"
}
install_extra_voices

if ! "$PYTHON" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 12)))'; then
  echo "setup: error: $("$PYTHON" --version 2>&1) found; duet needs Python 3.10-3.12 (set PYTHON=python3.11)" >&2
  exit 1
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# KenLM's lmplz/build_binary (modified Kneser-Ney n-gram estimation for tools/train_ngram_lm.py) are not
# packaged by Debian; the PyPI sdist of kenlm carries their sources, so they are compiled into .venv/bin.
KENLM_VERSION=0.3.0
KENLM_DEBS="cmake g++ make libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev"
build_kenlm_tools() {
  [ -x "$VENV/bin/lmplz" ] && [ -x "$VENV/bin/build_binary" ] && return 0
  missing_debs=""
  for pkg in $KENLM_DEBS; do dpkg -s "$pkg" >/dev/null 2>&1 || missing_debs="$missing_debs $pkg"; done
  if [ -n "$missing_debs" ] && [ "${DUET_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo -n"
    echo "setup: installing KenLM build dependencies ($missing_debs)"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing_debs >/dev/null \
      || { echo "setup: note: could not install$missing_debs; n-gram LMs (tools/train_ngram_lm.py) unavailable" >&2; return 0; }
  fi
  echo "setup: compiling KenLM lmplz + build_binary $KENLM_VERSION into $VENV/bin (a few minutes, once)"
  kenlm_tmp=$(mktemp -d)
  if "$VENV/bin/python" -m pip download -q --no-deps --no-binary kenlm "kenlm==$KENLM_VERSION" -d "$kenlm_tmp" \
     && tar -xzf "$kenlm_tmp/kenlm-$KENLM_VERSION.tar.gz" -C "$kenlm_tmp" \
     && cmake -S "$kenlm_tmp/kenlm-$KENLM_VERSION" -B "$kenlm_tmp/build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 >"$kenlm_tmp/cmake.log" 2>&1 \
     && cmake --build "$kenlm_tmp/build" --target lmplz build_binary -j "$(nproc)" >"$kenlm_tmp/build.log" 2>&1; then
    cp "$kenlm_tmp/build/bin/lmplz" "$kenlm_tmp/build/bin/build_binary" "$VENV/bin/"
  else
    echo "setup: note: KenLM build failed (logs kept in $kenlm_tmp); n-gram LMs (tools/train_ngram_lm.py) unavailable" >&2
    return 0
  fi
  rm -rf "$kenlm_tmp"
}
build_kenlm_tools

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  echo "setup: $VENV is up to date"
else
  echo "setup: installing into $VENV (first time: a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q torch==2.13.0
  "$VENV/bin/python" -m pip install -q -e ".[dev]"
  # a .nemo built on duet's encoders (Whisper's) restores in any process of this environment: duet.nemo_targets
  # lets NeMo instantiate them, from a .pth that Python runs at start-up (it imports nothing heavy)
  site_dir=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$VENV/bin/python" -c 'import duet.nemo_targets as t; print(t.PTH_LINE, end="")' > "$site_dir/duet-nemo-targets.pth"
  echo "$want_stamp" > "$STAMP"
  echo "setup: done ($("$VENV/bin/python" -c 'import torch, nemo; print(f"torch {torch.__version__}, nemo {nemo.__version__}")' 2>/dev/null | tail -1))"
fi

# No GPT-2 weights ship on PyPI, but its tokenizer files do: openai-whisper==20230124 carries them in its
# sdist. pip download must prepare the sdist's metadata, and its setup.py imports pkg_resources, which
# setuptools >= 81 no longer has -- hence the build constraint.
GPT2_TOKENIZER_DIR="$VENV/share/gpt2-tokenizer"
fetch_gpt2_tokenizer() {
  [ -f "$GPT2_TOKENIZER_DIR/vocab.json" ] && [ -f "$GPT2_TOKENIZER_DIR/merges.txt" ] && return 0
  echo "setup: fetching GPT-2's vocab.json + merges.txt (openai-whisper==20230124 sdist) into $GPT2_TOKENIZER_DIR"
  gpt2_tmp=$(mktemp -d)
  echo "setuptools<81" > "$gpt2_tmp/build-constraints.txt"
  if "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: --build-constraint "$gpt2_tmp/build-constraints.txt" \
       openai-whisper==20230124 -d "$gpt2_tmp" >"$gpt2_tmp/pip.log" 2>&1 \
     && tar -xzf "$gpt2_tmp/openai-whisper-20230124.tar.gz" -C "$gpt2_tmp" openai-whisper-20230124/whisper/assets/gpt2; then
    mkdir -p "$GPT2_TOKENIZER_DIR.partial"
    cp "$gpt2_tmp"/openai-whisper-20230124/whisper/assets/gpt2/{vocab.json,merges.txt} "$GPT2_TOKENIZER_DIR.partial/"
    rm -rf "$GPT2_TOKENIZER_DIR" && mv "$GPT2_TOKENIZER_DIR.partial" "$GPT2_TOKENIZER_DIR"
    rm -rf "$gpt2_tmp"
  else
    echo "setup: note: could not fetch the GPT-2 tokenizer files (log in $gpt2_tmp/pip.log); their tests will skip" >&2
  fi
}
fetch_gpt2_tokenizer
