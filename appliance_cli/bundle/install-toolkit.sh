#!/bin/sh
# install-toolkit.sh: install the appliance toolkit on this machine from the bundle this script
# sits in, offline. As root, from the mounted stick:
#
#     sudo sh /media/appliance-usb/bundle/install-toolkit.sh
#
# `appliance bundle build` writes it to the bundle's root with the data block below filled in:
# the files it needs (controller runtime, wheels) as listed in manifest.json, with their blobs
# and sha256, so it needs no JSON parser and no Python before it starts. manifest.json records
# this script's sha256 (`install_script`), so `appliance bundle verify` catches an edited copy,
# and the script refuses to run when manifest.json does not record it.
#
#  1. every file it uses is joined from blobs/sha256 and checked against its sha256 first.
#  2. controller Python: the bundle's controller runtime (a relocatable CPython) unpacked to
#     $PREFIX/python; else python3.X / python3 from PATH when its version fits the wheels;
#     else it stops, naming what is missing.
#  3. a venv at $PREFIX/venv (`python -m venv --without-pip`: no ensurepip / python3-venv
#     needed), the toolkit installed into it by pip run from the bundled pip wheel itself,
#     with --no-index: nothing is fetched from any network.
#  4. /usr/local/bin/appliance -> $PREFIX/venv/bin/appliance; prints the version and what next.
#
# A re-run with the same bundle changes nothing (the install records what it was made from);
# a re-run with another bundle replaces the install. Exit codes as the CLI's: 3 a missing
# prerequisite (root, Python, a command), 4 the bundle is incomplete or corrupt, 1 otherwise.
# APPLIANCE_PREFIX (default /opt/appliance) and APPLIANCE_BIN_LINK (default
# /usr/local/bin/appliance) move the install and the link (the tests use them).
set -eu

PROG=install-toolkit.sh
PREFIX=${APPLIANCE_PREFIX:-/opt/appliance}
BIN_LINK=${APPLIANCE_BIN_LINK:-/usr/local/bin/appliance}

# @@BUNDLE-DATA@@

die() {
	code=$1
	shift
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit "$code"
}

say() { printf '%s: %s\n' "$PROG" "$*"; }

[ -n "${TOOLKIT_VERSION:-}" ] ||
	die 4 "this is the unfilled template: run the install-toolkit.sh at the root of a bundle"
[ "$(id -u)" = 0 ] || die 3 "run it as root: sudo sh $0"
for tool in sha256sum tar gzip mktemp cut sed grep wc ln; do
	command -v "$tool" >/dev/null 2>&1 || die 3 "the '$tool' command is missing on this machine"
done

case $0 in
*/*) BUNDLE=$(cd "${0%/*}" && pwd -P) ;;
*) BUNDLE=$(pwd -P) ;;
esac
MANIFEST=$BUNDLE/manifest.json
[ -f "$MANIFEST" ] ||
	die 4 "$MANIFEST is missing: not a complete bundle (copy the whole bundle directory)"
self=$(sha256sum <"$0" | cut -d' ' -f1)
grep -q "sha256:$self" "$MANIFEST" ||
	die 4 "manifest.json does not record this script's sha256 ($self): it was edited, or it belongs to another bundle"

# the install's identity: a re-run with the same data is a no-op
STAMP=$(bundle_files | sha256sum | cut -d' ' -f1)
STAMP_FILE=$PREFIX/venv/.appliance-install

version_fits() { # X.Y -> does a Python of that version run the bundle's wheels?
	if [ -n "$PYTHON_EXACT" ]; then
		[ "$1" = "$PYTHON_EXACT" ]
		return
	fi
	major=${1%%.*} minor=${1#*.} want_major=${PYTHON_MIN%%.*} want_minor=${PYTHON_MIN#*.}
	[ "$major" -gt "$want_major" ] || { [ "$major" -eq "$want_major" ] && [ "$minor" -ge "$want_minor" ]; }
}

py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

NEED_PY="CPython ${PYTHON_EXACT:-$PYTHON_MIN or newer}"

installed_version() {
	[ -x "$PREFIX/venv/bin/appliance" ] || return 1
	"$PREFIX/venv/bin/appliance" --version 2>/dev/null | sed -n 's/^appliance //p'
}

link_and_report() {
	mkdir -p "${BIN_LINK%/*}"
	ln -sfn "$PREFIX/venv/bin/appliance" "$BIN_LINK"
	got=$("$BIN_LINK" --version 2>&1) || die 1 "$BIN_LINK --version failed: $got"
	[ "$got" = "appliance $TOOLKIT_VERSION" ] ||
		die 1 "$BIN_LINK reports '$got', expected 'appliance $TOOLKIT_VERSION'"
	pyv=$("$PREFIX/venv/bin/python" -c 'import sys; print(sys.version.split()[0])')
	say "$1: $got in $PREFIX/venv (Python $pyv), run as $BIN_LINK"
	cat <<EOF
next:
  appliance init /root/site      # then edit /root/site/appliance.yml (bundle.source: $BUNDLE)
  appliance config validate --site /root/site
  appliance install --site /root/site
EOF
}

if [ -f "$STAMP_FILE" ] && [ "$(cat "$STAMP_FILE")" = "$STAMP" ] &&
	[ "$(installed_version || true)" = "$TOOLKIT_VERSION" ]; then
	link_and_report "already installed from this bundle, nothing to do"
	exit 0
fi

mkdir -p "$PREFIX"
WORK=$(mktemp -d "$PREFIX/.install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
mkdir "$WORK/wheels"

fetch_file() { # KIND NAME SHA256 SIZE BLOB... -> $WORK/<dir>/NAME, checked against SHA256
	kind=$1 name=$2 want=$3 size=$4
	shift 4
	case $kind in
	wheel) out=$WORK/wheels/$name ;;
	*) out=$WORK/$name ;;
	esac
	: >"$out"
	for blob in "$@"; do
		path=$BUNDLE/blobs/sha256/$blob
		[ -f "$path" ] ||
			die 4 "$kind $name: blob sha256:$blob is missing from $BUNDLE/blobs/sha256 (incomplete copy?)"
		cat "$path" >>"$out" || die 4 "$kind $name: cannot read blob sha256:$blob"
	done
	got=$(sha256sum <"$out" | cut -d' ' -f1)
	[ "$got" = "$want" ] ||
		die 4 "$kind $name: content does not match its sha256 $want (corrupt blob; re-copy the bundle)"
	[ "$(wc -c <"$out")" -eq "$size" ] || die 4 "$kind $name: size differs from the manifest's $size"
}

# 1. the files, checked
say "checking the toolkit's files in $BUNDLE"
RUNTIME_SHA=
bundle_files >"$WORK/files"
while read -r kind name want size blobs; do
	# shellcheck disable=SC2086 # $blobs: hex digests, one word each
	fetch_file "$kind" "$name" "$want" "$size" $blobs
	if [ "$kind" = runtime ]; then RUNTIME_SHA=$want; fi
done <"$WORK/files"
for whl in "$TOOLKIT_WHEEL" "$PIP_WHEEL"; do
	[ -f "$WORK/wheels/$whl" ] || die 4 "the data block does not list $whl: rebuild the bundle"
done

# 2. controller Python
PY=
if [ -n "$RUNTIME" ]; then
	marker=$PREFIX/python/.appliance-runtime
	if [ "$(cat "$marker" 2>/dev/null || true)" != "$RUNTIME_SHA" ] || [ ! -x "$PREFIX/python/bin/python3" ]; then
		say "unpacking the controller runtime $RUNTIME to $PREFIX/python"
		rm -rf "$PREFIX/.python.new"
		mkdir "$PREFIX/.python.new"
		tar --no-same-owner -xzf "$WORK/$RUNTIME" -C "$PREFIX/.python.new" || die 4 "cannot unpack $RUNTIME"
		set -- "$PREFIX/.python.new"/*
		if [ $# -ne 1 ] || [ ! -x "$1/bin/python3" ]; then
			die 4 "$RUNTIME does not hold one top directory with bin/python3 (not an install_only build?)"
		fi
		rm -rf "$PREFIX/python"
		mv "$1" "$PREFIX/python"
		rmdir "$PREFIX/.python.new"
		printf '%s\n' "$RUNTIME_SHA" >"$marker"
	fi
	PY=$PREFIX/python/bin/python3
	v=$(py_version "$PY") || die 4 "the controller runtime $PREFIX/python/bin/python3 does not run on this machine"
	version_fits "$v" || die 4 "the controller runtime is Python $v, the wheels need $NEED_PY: rebuild the bundle"
else
	seen=
	for cand in ${PYTHON_EXACT:+python$PYTHON_EXACT} python3 python3.13 python3.12 python3.11; do
		exe=$(command -v "$cand" 2>/dev/null) || continue
		v=$(py_version "$exe") || continue
		if version_fits "$v"; then
			PY=$exe
			break
		fi
		case " $seen " in *" $exe=$v "*) ;; *) seen="$seen $exe=$v" ;; esac
	done
	[ -n "$PY" ] ||
		die 3 "no controller Python: the toolkit needs $NEED_PY and this bundle carries no controller runtime (found:${seen:- no python3})"
fi
say "controller Python: $PY ($(py_version "$PY"))"

# 3. the venv, from the bundle's wheels only
rm -rf "$PREFIX/venv"
"$PY" -m venv --without-pip "$PREFIX/venv" || die 1 "$PY -m venv failed"
say "installing appliance-toolkit $TOOLKIT_VERSION and its dependencies into $PREFIX/venv (offline)"
PIP_CONFIG_FILE=/dev/null "$PREFIX/venv/bin/python" "$WORK/wheels/$PIP_WHEEL/pip" install \
	--isolated --no-index --find-links "$WORK/wheels" --only-binary :all: --no-cache-dir \
	--disable-pip-version-check --no-warn-script-location --root-user-action=ignore --quiet \
	"$WORK/wheels/$TOOLKIT_WHEEL" || die 1 "pip install from the bundle's wheels failed (see above)"
printf '%s\n' "$STAMP" >"$STAMP_FILE"

# 4. on PATH
link_and_report "installed"
