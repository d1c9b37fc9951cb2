#!/bin/sh
# install-toolkit.sh: install the appliance toolkit on this machine from the bundle this script
# sits in, offline. As root, from the mounted stick:
#
#     sudo sh /media/appliance-usb/bundle/install-toolkit.sh --key signing.pub
#
# `appliance bundle build` writes it to the bundle's root with the data block below filled in:
# the files it needs (controller runtime, wheels) as listed in manifest.json, with their blobs
# and sha256, so it needs no JSON parser and no Python (but on OpenSSL 1.1.1, below) before it starts. manifest.json records
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
#  4. bash completion, written by the installed toolkit from its own parser (`appliance completion
#     bash`) to /usr/share/bash-completion/completions/appliance, where bash-completion finds it.
#  5. /usr/local/bin/appliance -> $PREFIX/venv/bin/appliance; prints the version and what next.
#
# Before it trusts anything on the stick, it checks manifest.sig over manifest.json (Ed25519, with
# `openssl pkeyutl -verify -rawin`; where openssl is 1.1.1, as on Ubuntu 20.04, RFC 8032's
# verification in the system's python3) against the signer's public key: `--key PUB` (PREFIX.pub of
# `appliance bundle keygen`; default $APPLIANCE_BUNDLE_PUBKEY), or else the one .pub file next to
# the bundle directory on the stick, whose key id (sha256:<hex of the raw key>, as `bundle keygen`
# and `bundle verify` print it) the operator confirms: typed `yes` at the prompt, or
# `--fingerprint sha256:HEX` given beforehand. No terminal and no confirmation: it refuses. Only
# then does it check its own sha256 against that verified manifest.json.
#
# A re-run with the same bundle changes nothing (the install records what it was made from);
# a re-run with another bundle replaces the install. Exit codes as the CLI's: 2 a bad argument,
# 3 a missing prerequisite (root, Python, a command, the key or its confirmation), 4 the bundle is
# incomplete, corrupt or not signed by that key, 1 otherwise.
# APPLIANCE_PREFIX (default /opt/appliance), APPLIANCE_BIN_LINK (default /usr/local/bin/appliance)
# and APPLIANCE_BASH_COMPLETION (default /usr/share/bash-completion/completions/appliance) move the
# install, the link and the completion script (the tests use them).
set -eu

PROG=install-toolkit.sh
PREFIX=${APPLIANCE_PREFIX:-/opt/appliance}
BIN_LINK=${APPLIANCE_BIN_LINK:-/usr/local/bin/appliance}
COMPLETION=${APPLIANCE_BASH_COMPLETION:-/usr/share/bash-completion/completions/appliance}

# @@BUNDLE-DATA@@

die() {
	code=$1
	shift
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit "$code"
}

say() { printf '%s: %s\n' "$PROG" "$*"; }

USAGE="usage: sudo sh $0 [--key PUB] [--fingerprint sha256:HEX]"
KEY=${APPLIANCE_BUNDLE_PUBKEY:-}
FINGERPRINT=
while [ $# -gt 0 ]; do
	case $1 in
	--key | --pubkey | --fingerprint)
		[ $# -ge 2 ] || die 2 "$1 needs a value ($USAGE)"
		if [ "$1" = --fingerprint ]; then FINGERPRINT=$2; else KEY=$2; fi
		shift 2
		;;
	--key=* | --pubkey=*) KEY=${1#*=} && shift ;;
	--fingerprint=*) FINGERPRINT=${1#*=} && shift ;;
	-h | --help)
		printf '%s\n' "$USAGE"
		exit 0
		;;
	*) die 2 "unknown argument '$1' ($USAGE)" ;;
	esac
done
if [ -n "$FINGERPRINT" ]; then
	fp=$(printf '%s' "${FINGERPRINT#sha256:}" | tr 'A-F' 'a-f')
	case $fp in
	*[!0-9a-f]*) die 2 "--fingerprint: '$FINGERPRINT' is not a key id (sha256: and 64 hex digits)" ;;
	esac
	[ ${#fp} -eq 64 ] || die 2 "--fingerprint: '$FINGERPRINT' is not a key id (sha256: and 64 hex digits)"
	FINGERPRINT=sha256:$fp
fi

[ -n "${TOOLKIT_VERSION:-}" ] ||
	die 4 "this is the unfilled template: run the install-toolkit.sh at the root of a bundle"
[ "$(id -u)" = 0 ] || die 3 "run it as root: sudo sh $0"
for tool in sha256sum tar gzip mktemp cut sed grep wc ln openssl base64 head tail od tr; do
	command -v "$tool" >/dev/null 2>&1 || die 3 "the '$tool' command is missing on this machine"
done

case $0 in
*/*) BUNDLE=$(cd "${0%/*}" && pwd -P) ;;
*) BUNDLE=$(pwd -P) ;;
esac
SELF=$BUNDLE/${0##*/}
case $KEY in /* | '') ;; *) KEY=$(pwd -P)/$KEY ;; esac
# the cwd is / from here on: run from the stick (cd /media/appliance-usb/bundle), a file there such
# as logging.py would otherwise be imported by `python -m venv` ('' first on sys.path) as root
cd /
MANIFEST=$BUNDLE/manifest.json
[ -f "$MANIFEST" ] ||
	die 4 "$MANIFEST is missing: not a complete bundle (copy the whole bundle directory)"

# 0. the chain: manifest.sig over manifest.json, by the operator's key. Everything read from the
# stick from here on is read once, into a private directory, and used from there.
CHECK=$(mktemp -d "${TMPDIR:-/tmp}/install-toolkit.XXXXXX") || die 1 "cannot make a temporary directory"
WORK=
COMPLETION_NEW=
trap 'rm -rf "$CHECK" ${WORK:+"$WORK"} ${COMPLETION_NEW:+"$COMPLETION_NEW"}' EXIT
trap 'exit 130' INT TERM

[ -f "$BUNDLE/manifest.sig" ] ||
	die 4 "manifest.sig is missing: manifest.json is not signed (appliance bundle sign $BUNDLE --key KEY.key), refusing the bundle"
{ [ "$(wc -c <"$BUNDLE/manifest.sig")" -le 4096 ] && cat "$BUNDLE/manifest.sig" >"$CHECK/manifest.sig"; } ||
	die 4 "manifest.sig is malformed (not an appliance-bundle-signature/v1 file), refusing the bundle"
cat "$MANIFEST" >"$CHECK/manifest.json" || die 4 "cannot read $MANIFEST"

ON_STICK=
if [ -z "$KEY" ]; then
	STICK=${BUNDLE%/*}
	set -- "${STICK:-}"/*.pub
	[ -f "$1" ] ||
		die 3 "manifest.sig: no public key to check it with: pass --key PUB (the signer's PREFIX.pub), or put it on the stick beside ${BUNDLE##*/}/ and confirm its key id"
	[ $# -eq 1 ] || die 3 "manifest.sig: several public keys beside the bundle ($*): pass --key PUB"
	KEY=$1
	ON_STICK=1
fi
[ -f "$KEY" ] || die 3 "manifest.sig: the public key $KEY does not exist"
openssl pkey -pubin -in "$KEY" -outform DER -out "$CHECK/key.der" 2>/dev/null ||
	die 3 "manifest.sig: $KEY is not a PEM public key (the signer's PREFIX.pub, not the .key)"
# an Ed25519 SubjectPublicKeyInfo: this 12-byte header, then the raw 32-byte key
{ [ "$(wc -c <"$CHECK/key.der")" -eq 44 ] &&
	[ "$(head -c 12 "$CHECK/key.der" | od -An -tx1 | tr -d ' \n')" = 302a300506032b6570032100 ]; } ||
	die 3 "manifest.sig: $KEY is not an Ed25519 public key"
KEY_ID=sha256:$(tail -c 32 "$CHECK/key.der" | sha256sum | cut -d' ' -f1)

if [ -n "$FINGERPRINT" ]; then
	[ "$KEY_ID" = "$FINGERPRINT" ] ||
		die 4 "manifest.sig: the key $KEY has key id $KEY_ID, not $FINGERPRINT (--fingerprint): not the signer's key, refusing the bundle"
	say "the public key $KEY: key id $KEY_ID, as --fingerprint says"
elif [ -n "$ON_STICK" ]; then
	say "the public key on the stick: $KEY"
	say "its key id: $KEY_ID"
	if [ ! -t 0 ]; then
		die 3 "manifest.sig: the key on the stick is not confirmed and there is no terminal to ask: compare its key id ($KEY_ID) with the signer's, then pass --fingerprint $KEY_ID (or --key PUB)"
	fi
	printf '%s: %s ' "$PROG" "is this the key id of the bundle's signer (as \`appliance bundle keygen\` printed it)? Type yes to trust it:"
	answer=
	read -r answer || true
	[ "$answer" = yes ] || die 3 "manifest.sig: the key on the stick was not confirmed, nothing installed"
fi

# manifest.sig is JSON ({format, algorithm, key_id, manifest_digest, signature}: appliance_cli/
# bundle/signing.py); no parser needed for two string fields
flat=$(tr -d '\n\r' <"$CHECK/manifest.sig")
signer=$(printf '%s' "$flat" | sed -n 's/.*"key_id"[[:space:]]*:[[:space:]]*"\(sha256:[0-9a-f]*\)".*/\1/p')
{ printf '%s' "$flat" | sed -n 's/.*"signature"[[:space:]]*:[[:space:]]*"\([A-Za-z0-9+\/=]*\)".*/\1/p' |
	base64 -d >"$CHECK/signature" 2>/dev/null && [ "$(wc -c <"$CHECK/signature")" -eq 64 ]; } ||
	die 4 "manifest.sig is malformed (no base64 Ed25519 signature in it), refusing the bundle"
[ -z "$signer" ] || [ "$signer" = "$KEY_ID" ] ||
	die 4 "manifest.sig was made by key $signer, not by the trusted key $KEY_ID ($KEY): wrong key, refusing the bundle"

ed25519_openssl() { # DER-KEY MESSAGE SIGNATURE -> openssl's verdict
	openssl pkeyutl -verify -pubin -keyform DER -inkey "$1" -rawin -in "$2" -sigfile "$3" >/dev/null 2>&1
}
# OpenSSL 1.1.1 (Ubuntu 20.04's) has no `pkeyutl -rawin` and cannot verify Ed25519 at all: there,
# the system's python3 (any 3.x; focal's 3.8) runs RFC 8032's verification (section 5.1.7), below
# in full, standard library only, isolated (-I: nothing imported from the stick or the cwd)
ed25519_python() { # RAW-KEY MESSAGE SIGNATURE -> the verdict of RFC 8032's verify
	"$PY3" -I - "$1" "$2" "$3" <<'ED25519'
import hashlib
import sys

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def add(a, b):  # extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, x*y = T/Z
    e = (a[1] - a[0]) * (b[1] - b[0]) % P
    f = (a[1] + a[0]) * (b[1] + b[0]) % P
    g = 2 * a[3] * b[3] * D % P
    h = 2 * a[2] * b[2] % P
    e, f, g, h = f - e, h - g, h + g, f + e
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def mul(s, a):
    q = (0, 1, 1, 0)
    while s:
        if s & 1:
            q = add(q, a)
        a = add(a, a)
        s >>= 1
    return q


def same(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def decode(s):  # a point's 32-byte encoding -> the point, or None when it encodes none
    y = int.from_bytes(s, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        if sign:
            return None
        x = 0
    else:
        x = pow(x2, (P + 3) // 8, P)
        if (x * x - x2) % P:
            x = x * SQRT_M1 % P
        if (x * x - x2) % P:
            return None
        if x & 1 != sign:
            x = P - x
    return (x, y, 1, x * y % P)


BASE = decode((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))


def verify(key, msg, sig):
    if len(key) != 32 or len(sig) != 64:
        return False
    a, r, s = decode(key), decode(sig[:32]), int.from_bytes(sig[32:], "little")
    if a is None or r is None or s >= L:
        return False
    h = int.from_bytes(hashlib.sha512(sig[:32] + key + msg).digest(), "little") % L
    return same(mul(s, BASE), add(r, mul(h, a)))


if __name__ == "__main__":
    key, msg, sig = (open(f, "rb").read() for f in sys.argv[1:4])
    sys.exit(0 if verify(key, msg, sig) else 1)
ED25519
}
ed25519_verify() { # KEY.der MESSAGE SIGNATURE (KEY.raw beside KEY.der)
	if [ "$ED25519" = openssl ]; then
		ed25519_openssl "$@"
	else
		ed25519_python "${1%.der}.raw" "$2" "$3" >/dev/null 2>&1
	fi
}
tail -c 32 "$CHECK/key.der" >"$CHECK/key.raw"
# which of the two verifies Ed25519 here: RFC 8032's test 2 must pass (so a failure below can only
# mean the signature)
printf 'MCowBQYDK2VwAyEAPUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw=\n' | base64 -d >"$CHECK/rfc8032.der"
tail -c 32 "$CHECK/rfc8032.der" >"$CHECK/rfc8032.raw"
printf 'kqAJqfDUyrhyDoILX2QlQKKye1QWUD+Ps3YiI+vbadoIWsHkPhWZbkWPNhPQ8R2MOHsurrQwKu6wDSkWErsMAA==\n' |
	base64 -d >"$CHECK/rfc8032.sig"
printf 'r' >"$CHECK/rfc8032.msg"
selftest() { # VIA -> VIA accepts the vector, and refuses its signature for another message
	ED25519=$1
	ed25519_verify "$CHECK/rfc8032.der" "$CHECK/rfc8032.msg" "$CHECK/rfc8032.sig" &&
		! ed25519_verify "$CHECK/rfc8032.der" "$CHECK/rfc8032.raw" "$CHECK/rfc8032.sig"
}
PY3=
if ! selftest openssl; then
	no_openssl="this machine's openssl ($(openssl version 2>&1)) cannot verify Ed25519 signatures (OpenSSL 3.0 or newer can)"
	PY3=$(command -v python3 2>/dev/null) ||
		die 3 "manifest.sig cannot be checked: $no_openssl, and there is no python3 to check it with"
	say "$no_openssl: checking manifest.sig with $PY3"
	selftest python3 || die 3 "manifest.sig cannot be checked: $no_openssl, and $PY3 fails RFC 8032's test vector"
fi
ed25519_verify "$CHECK/key.der" "$CHECK/manifest.json" "$CHECK/signature" ||
	die 4 "manifest.json does not match manifest.sig: the manifest was changed after signing, refusing the bundle"
say "manifest.json: signature valid (key $KEY_ID)"

self=$(sha256sum <"$SELF" | cut -d' ' -f1)
grep -q "sha256:$self" "$CHECK/manifest.json" ||
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

install_completion() { # the installed toolkit's bash completion, replaced whole when it differs
	dir=${COMPLETION%/*}
	mkdir -p "$dir" || die 1 "cannot make the directory $dir for the bash completion"
	COMPLETION_NEW=$(mktemp "$dir/.appliance.XXXXXX") || die 1 "cannot write in $dir"
	"$PREFIX/venv/bin/appliance" completion bash >"$COMPLETION_NEW" ||
		die 1 "$PREFIX/venv/bin/appliance completion bash failed (see above)"
	if [ -f "$COMPLETION" ] &&
		[ "$(sha256sum <"$COMPLETION_NEW")" = "$(sha256sum <"$COMPLETION")" ]; then
		rm -f "$COMPLETION_NEW"
	else
		chmod 644 "$COMPLETION_NEW"
		mv -f "$COMPLETION_NEW" "$COMPLETION" || die 1 "cannot write $COMPLETION"
		say "bash completion: $COMPLETION (zsh: add 'source <(appliance completion zsh)' to ~/.zshrc)"
	fi
	COMPLETION_NEW=
}

if [ -f "$STAMP_FILE" ] && [ "$(cat "$STAMP_FILE")" = "$STAMP" ] &&
	[ "$(installed_version || true)" = "$TOOLKIT_VERSION" ]; then
	install_completion
	link_and_report "already installed from this bundle, nothing to do"
	exit 0
fi

mkdir -p "$PREFIX"
WORK=$(mktemp -d "$PREFIX/.install.XXXXXX")
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

# 4. bash completion; 5. on PATH
install_completion
link_and_report "installed"
