# Sourced by scripts/test.sh and scripts/simulate.sh: makes the virtual environment .venv inside the checkout
# (installing Debian's python3-venv when venv cannot bootstrap pip) and activates it. Needs Python >= 3.11.
# Defines apt_install for the caller.
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "${0##*/}: Python >= 3.11 is needed; $PYTHON is $("$PYTHON" -V 2>&1)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "== creating the virtual environment .venv"
  if ! "$PYTHON" -m venv .venv >/dev/null 2>&1; then
    # Debian ships venv's pip bootstrap (ensurepip) in a separate package.
    rm -rf .venv
    echo "== installing Debian's python3-venv"
    apt_install python3-venv
    "$PYTHON" -m venv .venv
  fi
fi
# shellcheck disable=SC1091
. .venv/bin/activate
