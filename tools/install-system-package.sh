#!/bin/sh
# Install a system package the set-up needs (graphviz's `dot`, Debian's python3-venv).
#   sh tools/install-system-package.sh DEBIAN_PACKAGE [BREW_FORMULA]
# Debian/Ubuntu: apt-get (after apt-get update) as root, or through sudo; macOS: brew;
# anything else: one clear message saying what to install, and exit status 1.
set -u
deb="$1"
formula="${2:-$1}"

if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        as_root=""
    elif command -v sudo >/dev/null 2>&1; then
        # without a terminal (CI) sudo must not wait for a password nobody can type
        if [ -t 0 ]; then as_root="sudo"; else as_root="sudo -n"; fi
    else
        echo "uopgrad set-up: please install '$deb' (apt-get install $deb) as root, then run make again" >&2
        exit 1
    fi
    echo "uopgrad set-up: installing $deb with apt-get" >&2
    log=$(mktemp)
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 &&
        $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >>"$log" 2>&1 &&
        { rm -f "$log"; exit 0; }
    tail -n 20 "$log" >&2
    rm -f "$log"
    echo "uopgrad set-up: apt-get could not install '$deb'; please install it, then run make again" >&2
    exit 1
fi
if [ "$(uname -s)" = Darwin ] && command -v brew >/dev/null 2>&1; then
    echo "uopgrad set-up: installing $formula with brew" >&2
    brew install "$formula" && exit 0
fi
echo "uopgrad set-up: please install '$deb' with your system's package manager (brew install $formula on macOS), then run make again" >&2
exit 1
