#!/usr/bin/env bash
# Usage: bash tools/setup.sh
#
# Creates .venv/ with duet and everything it needs; safe to re-run (seconds when nothing changed).
#   0. Python's venv module where the interpreter lacks it (python3.X-venv: stock Debian's python3 has no ensurepip).
#   1. Debian/Ubuntu packages for the synthetic corpus and `pipeline.py --speak` (sox, espeak-ng, flite,
#      festival + English voices, WordNet's example sentences) and tools/serve.py (ffmpeg for WebM uploads; curl
#      for docs/serving.md's examples of its API; chromium + chromium-driver, apart, for its page's browser test) when
#      apt-get is usable; otherwise a note and carry on (the bundled samples/ need none of them). Those are all in
#      Debian main. The other English voices of the generalisation pool (festival rab/don, mbrola us1/us2/us3/en1,
#      RHVoice, SVOX pico) live in Debian's contrib/non-free components: they are fetched through a private apt list
#      (the system's sources stay as they are), best effort. The lists and the apt step are in tools/setup_apt.sh: a
#      failed install shows apt's own error, and while another apt/dpkg process holds apt's lock the setup says so
#      and waits for it (APT_LOCK_WAIT seconds, default 600).
#   2. torch 2.13.0 before anything else, in the build `python -m slm.choose_torch_build` picks from nvidia-smi:
#      on a machine without an NVIDIA driver plain torch==2.13.0 (a CPU build where pip reads a local wheel mirror
#      holding one, as the project's own machines do; PyPI's Linux wheel of that version is the CUDA 13.0 build,
#      GPU or not, and also runs on the CPU); with GPUs,
#      PyPI's CUDA 13.0 build where the driver runs CUDA 13 and every GPU is Turing (compute 7.5) or newer, else
#      PyTorch's CUDA 12.6 build (V100, CUDA 12 drivers) from PyTorch's own index. A machine no build fits, or an
#      index out of reach, stops the setup with a line saying what to install. Installing torch first lets the
#      setup choose the build instead of pip, which would resolve NeMo's torch>=2.6 to whatever PyPI has newest.
#   3. KenLM's lmplz/build_binary compiled from the kenlm sdist into .venv/bin (Boost from Debian), or copied
#      from ~/.cache/duet where an earlier setup on this machine compiled them.
#   4. `pip install -e .[dev]`: NeMo 3.0.0 (ASR), transformers, datasets, ... pinned in pyproject.toml.
#   5. GPT-2's own vocab.json + merges.txt (from the openai-whisper==20230124 sdist on PyPI) into
#      .venv/share/gpt2-tokenizer, for the tests that check the template and collator on the real tokenizer.
# Environment: PYTHON=python3.11 picks the interpreter (3.10-3.12); DUET_SKIP_APT=1 skips every apt step
# (0, 1 and KenLM's build dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.duet-setup"
want_stamp=$(cat pyproject.toml tools/setup.sh slm/torch_build.py slm/choose_torch_build.py | sha256sum | cut -d' ' -f1)

# the package lists and the apt step (apt_install: waits while another apt/dpkg holds the lock, shows apt's error)
. tools/setup_apt.sh
install_system_packages
install_browser
install_extra_voices

if ! "$PYTHON" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 12)))'; then
  echo "setup: error: $("$PYTHON" --version 2>&1) found; duet needs Python 3.10-3.12 (set PYTHON=python3.11)" >&2
  exit 1
fi
install_venv_module
# a folder without a working pip is what a venv stopped halfway leaves (ensurepip missing): made again
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    rm -rf "$VENV"
    echo "setup: error: $PYTHON -m venv could not create $VENV (its message is above): install Python's venv" \
         "module (Debian/Ubuntu: apt-get install python3-venv) and run bash tools/setup.sh again" >&2
    exit 1
  fi
fi
# KenLM's lmplz/build_binary into .venv/bin (build_kenlm_tools: compiled once, then copied from the user's cache)
. tools/setup_kenlm.sh
build_kenlm_tools

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  echo "setup: $VENV is up to date"
else
  echo "setup: installing into $VENV (first time: a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # stdlib only, run from the repository root: nothing is installed yet
  torch_pip_args=$("$VENV/bin/python" -m slm.choose_torch_build) || exit 1
  # shellcheck disable=SC2086  # the requirement and its index are separate words
  if ! "$VENV/bin/python" -m pip install -q $torch_pip_args; then
    echo "setup: error: pip could not install $torch_pip_args (its error is above). Install that torch build" \
         "by hand (e.g. $VENV/bin/pip install <its wheel file>, fetched where that index is reachable), then run" \
         "bash tools/setup.sh again" >&2
    exit 1
  fi
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
