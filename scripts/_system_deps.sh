# Sourced by scripts/test: install the Debian packages some tests run as real programs, when
# their binary is missing (this project's machines are Debian and run as root; nothing else has
# to be installed by hand). Add a test's needs as one "BINARY PACKAGE" line below.
#
# PINLATER_NO_SYSTEM_DEPS=1 installs nothing: the tests that need a missing binary then skip
# (or fail under CI=true, like the other test services).
set -euo pipefail

PINLATER_SYSTEM_DEPS=(
  "/usr/bin/prometheus prometheus" # tests/integration/test_deploy_dashboard.py
  "/usr/bin/chromium chromium"             # tests/integration/test_dashboard_browser.py
  "/usr/bin/chromedriver chromium-driver"  # ... and the driver Selenium runs it with
)

_pinlater_install_system_deps() {
  local missing=() entry binary package
  for entry in "${PINLATER_SYSTEM_DEPS[@]}"; do
    read -r binary package <<<"$entry"
    [ -x "$binary" ] || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "${PINLATER_NO_SYSTEM_DEPS:-}" = "1" ]; then
    echo "scripts/test: not installing ${missing[*]} (PINLATER_NO_SYSTEM_DEPS=1); the tests" \
      "that need them will skip (and fail under CI=true)" >&2
    return 0
  fi
  local why=""
  if ! command -v apt-get >/dev/null 2>&1; then
    why="apt-get not found (not a Debian machine)"
  elif [ "$(id -u)" -ne 0 ]; then
    why="not running as root"
  fi
  if [ -n "$why" ]; then
    echo "scripts/test: the tests need the Debian package(s) ${missing[*]}, which are not" \
      "installed, and cannot install them: $why. Install them, or set" \
      "PINLATER_NO_SYSTEM_DEPS=1 to skip those tests." >&2
    return 1
  fi
  echo "scripts/test: installing Debian package(s) for the tests: ${missing[*]}" >&2
  local log
  log="$(mktemp -t pinlater-apt.XXXXXX)"
  if ! {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"
  } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "scripts/test: apt-get could not install ${missing[*]} (full log: $log)." \
      "Install them by hand, or set PINLATER_NO_SYSTEM_DEPS=1 to skip those tests." >&2
    return 1
  fi
  rm -f "$log"
}

_pinlater_install_system_deps
