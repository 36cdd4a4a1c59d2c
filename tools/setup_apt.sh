# Debian/Ubuntu packages of tools/setup.sh and the one function every apt-get call of the setup goes through.
# Sourced by tools/setup.sh, and by tests/test_setup_apt.py, which runs these steps against a fake apt-get.
#
# Environment: DUET_SKIP_APT=1 skips every apt step; APT_GET (default apt-get); APT_SUDO (default: nothing as root,
# else "sudo -n"); APT_LOCK_WAIT, the seconds to wait while another apt/dpkg process holds apt's lock (default
# 600); APT_LOCK_POLL, the seconds between two tries meanwhile (default 5); OS_RELEASE (default /etc/os-release).

# Debian main only: one package that apt cannot locate makes it refuse the whole list, so nothing from the
# contrib/non-free components may sit here (they are EXTRA_VOICE_PACKAGES). curl: docs/serving.md's examples of
# tools/serve.py's HTTP API (a minimal Debian has none)
SYSTEM_PACKAGES="sox libsox-fmt-all flac espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts wordnet-base ffmpeg curl"
# the page's browser test (tests/test_server_browser.py); installed apart, since on Ubuntu chromium is a snap
# wrapper that may not install, and that must not keep the packages above out
BROWSER_PACKAGES="chromium chromium-driver"
# contrib/non-free voices (duet/synth/voices.py, duet/synth/tts.py VOICE_PACKAGES); mbrola's voices are free for
# non-commercial use only
EXTRA_VOICE_PACKAGES="festvox-rablpc16k festvox-don mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 rhvoice rhvoice-english libttspico-utils"
# what KenLM's lmplz/build_binary compile with (build_kenlm_tools in tools/setup_kenlm.sh)
KENLM_DEBS="cmake g++ make libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev"

APT_GET=${APT_GET:-apt-get}
APT_LOCK_WAIT=${APT_LOCK_WAIT:-600}
APT_LOCK_POLL=${APT_LOCK_POLL:-5}
OS_RELEASE=${OS_RELEASE:-/etc/os-release}
if [ -z "${APT_SUDO+set}" ]; then
  APT_SUDO=""; [ "$(id -u)" != 0 ] && APT_SUDO="sudo -n"
fi
APT_UPDATED=0     # the system's package lists were refreshed by this setup already
APT_ERROR=""      # apt's own error of the last apt_run that failed

apt_usable() {
  command -v "${APT_GET%% *}" >/dev/null 2>&1
}

# apt_run ARG...: one apt-get call, its output kept back (shown by the caller when it fails: APT_ERROR). While
# another apt/dpkg process holds the lock (apt-get fails at once then), it says so and tries again every
# APT_LOCK_POLL seconds for up to APT_LOCK_WAIT seconds.
apt_run() {
  local out status told=0 lock_line deadline=$((SECONDS + APT_LOCK_WAIT))
  while :; do
    status=0
    out=$($APT_SUDO env DEBIAN_FRONTEND=noninteractive $APT_GET "$@" 2>&1) || status=$?
    [ "$status" = 0 ] && return 0
    lock_line=$(printf '%s\n' "$out" | grep -m1 -E 'Could not get lock|is another process using it\?' || true)
    if [ -z "$lock_line" ]; then
      APT_ERROR=$(printf '%s\n' "$out" | grep -E '^(E|Err):' | head -n 3 | tr '\n' ' ' || true)
      APT_ERROR=${APT_ERROR% }
      [ -n "$APT_ERROR" ] || APT_ERROR=$(printf '%s\n' "$out" | tail -n 1)
      [ -n "$APT_ERROR" ] || APT_ERROR="apt-get exited with status $status"
      return "$status"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      APT_ERROR="another apt/dpkg process still holds apt's lock after ${APT_LOCK_WAIT} s ($lock_line); run bash tools/setup.sh again when it has finished"
      return "$status"
    fi
    if [ "$told" = 0 ]; then
      echo "setup: another apt/dpkg process holds apt's lock ($lock_line); waiting up to ${APT_LOCK_WAIT} s for it"
      told=1
    fi
    sleep "$APT_LOCK_POLL"
  done
}

# apt_install WHAT PACKAGE...: refresh the package lists, then install PACKAGE... with no recommends. With
# APT_SOURCE_OPTS (apt-get options naming a private source list) the lists are those; without, the system's,
# refreshed once per setup. A failed refresh is a note and the install is still tried on the lists there are.
# Fails after one "setup: note:" line naming WHAT and apt's own error.
apt_install() {
  local what=$1; shift
  local opts=${APT_SOURCE_OPTS:-}
  if [ -n "$APT_SUDO" ] && ! $APT_SUDO true 2>/dev/null; then
    echo "setup: note: could not install $what: apt-get needs root, and sudo -n (passwordless sudo) is not available" >&2
    return 1
  fi
  echo "setup: installing $what ($*)"
  if [ -n "$opts" ] || [ "$APT_UPDATED" = 0 ]; then
    if apt_run $opts update -qq; then
      [ -n "$opts" ] || APT_UPDATED=1
    else
      echo "setup: note: apt-get update failed ($APT_ERROR); installing from the package lists there are" >&2
    fi
  fi
  if ! apt_run $opts install -y -qq --no-install-recommends "$@"; then
    echo "setup: note: could not install $what: $APT_ERROR" >&2
    return 1
  fi
}

install_system_packages() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  local missing="" cmd
  for cmd in sox espeak-ng flite text2wave ffmpeg; do command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"; done
  [ -f /usr/share/wordnet/data.noun ] || missing="$missing wordnet"
  [ -z "$missing" ] && return 0
  if ! apt_usable || ! apt_install "the system packages" $SYSTEM_PACKAGES; then
    echo "setup: note: still missing:$missing; only tools/make_sample_corpus.py, 'pipeline.py --speak', MP3/WebM uploads to tools/serve.py and its browser test need them: install them with your package manager." >&2
  fi
}

# `python3 -m venv` needs ensurepip, which Debian/Ubuntu ship apart from the interpreter (python3.X-venv, in
# main); a stock Debian 12 has python3 without it, and venv then stops halfway, leaving a folder without pip.
# PYTHON: the interpreter the setup uses.
install_venv_module() {
  "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1 && return 0
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  apt_usable || return 0
  local version
  version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  apt_install "Python's venv module" "python$version-venv" || true
}

install_browser() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
  apt_usable || return 0
  apt_install "the server page's browser test" $BROWSER_PACKAGES || echo "setup: note: its browser test skips" >&2
}

# The contrib/non-free voices through a private source list and state folder: nothing of the system's apt
# configuration changes. Debian only (the suite name comes from OS_RELEASE). Best effort: corpora skip the
# speakers of a voice that is not installed, naming its package.
install_extra_voices() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  command -v RHVoice-test >/dev/null 2>&1 && command -v pico2wave >/dev/null 2>&1 && [ -d /usr/share/mbrola/us1 ] \
    && [ -d /usr/share/festival/voices/english/don_diphone ] && [ -d /usr/share/festival/voices/english/rab_diphone ] \
    && return 0
  apt_usable && [ -r "$OS_RELEASE" ] || return 0
  local ID="" VERSION_CODENAME="" apt_dir
  . "$OS_RELEASE"
  [ "$ID" = debian ] && [ -n "$VERSION_CODENAME" ] || return 0
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial"
  echo "deb http://deb.debian.org/debian $VERSION_CODENAME main contrib non-free" > "$apt_dir/sources.list"
  APT_SOURCE_OPTS="-oDir::Etc::SourceList=$apt_dir/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$apt_dir/lists" \
    apt_install "the contrib/non-free TTS voices" $EXTRA_VOICE_PACKAGES \
    || echo "setup: note: corpora skip the speakers of these voices" >&2
  rm -rf "$apt_dir"
}

# KenLM's build dependencies that are not installed yet; fails (after a note) when apt could not install them.
# Without apt (or with DUET_SKIP_APT=1) it leaves them to the user: the build is tried and says what is missing.
install_kenlm_debs() {
  [ "${DUET_SKIP_APT:-0}" = 1 ] && return 0
  apt_usable && command -v dpkg >/dev/null 2>&1 || return 0
  local missing="" pkg
  for pkg in $KENLM_DEBS; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
  [ -z "$missing" ] && return 0
  apt_install "KenLM's build dependencies" $missing && return 0
  echo "setup: note: still missing:$missing; n-gram LMs (tools/train_ngram_lm.py) are unavailable" >&2
  return 1
}
