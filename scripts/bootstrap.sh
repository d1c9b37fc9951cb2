#!/usr/bin/env bash
# Installs everything the toolkit and its tests need on a fresh Debian 12 machine:
# host packages (for the rehearsal lab and bundle builds) and a Python venv at .venv.
# Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# containerd and shellcheck are for the unit tests only (containerd loads the rendered
# config.toml; shellcheck reads install-toolkit.sh): without them those tests skip. chromium
# (headless) renders the diagnose HTML report in its e2e test. gnupg signs the bundle's apt repositories.
# zsh runs `appliance completion zsh` in its unit test; xmllint (libxml2-utils) checks the GPU
# probe fixtures against NVIDIA's DTD. age makes the lab's backup key pair (the operator's, off the
# appliance) and opens its backups in the e2e tests. containernetworking-plugins: an integration
# test runs the stand-in's pod network with Debian's bridge and host-local.
HOST_PACKAGES=(
  make python3 python3-venv
  mmdebstrap systemd-container zstd dpkg-dev iproute2 openssh-client netcat-openbsd
  skopeo busybox-static apt-utils docker-registry apache2-utils openssl containerd containernetworking-plugins shellcheck chromium gnupg zsh libxml2-utils age
)
missing=()
for p in "${HOST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "error: host packages missing: ${missing[*]}" >&2
    echo "hint: run as root (./make.sh ...) or apt-get install them" >&2
    exit 3
  fi
  echo "bootstrap: apt-get install ${missing[*]}"
  apt-get update -qq
  # Tools only: packages like docker-registry must not start their daemons on this machine
  # (Debian's default registry listens on every interface). policy-rc.d 101 = "do not start".
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: $PY is $("$PY" --version 2>&1); ansible-core 2.18 needs Python >= 3.11" >&2
  exit 3
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [[ ! -f $stamp ]]; then
  echo "bootstrap: python venv .venv (ansible-core, ansible-runner, test tools)"
  [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
  # (this machine's pip config lists local indexes that may not exist: drop that noise only)
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]' 2> >(grep -v "is ignored: it is neither" >&2)
  .venv/bin/python -c 'import ansible_runner, appliance_cli' # fail loudly if the install did not work
  rm -f .venv/.installed-*; touch "$stamp"
fi

# Debian's real kubectl (kubernetes-client, v1.20) for the tests that run kubectl against the stand-in
# API server (tests/_support/real_kubectl.py: test_real_kubectl, test_standin_apiserver, the roles
# run on localhost): the .deb is fetched once into build/debs (they fail, not skip, without it).
if ! compgen -G "build/debs/kubernetes-client_*.deb" >/dev/null; then
  echo "bootstrap: Debian's kubernetes-client .deb (for the real-kubectl tests)"
  mkdir -p build/debs
  (cd build/debs && apt-get download -qq kubernetes-client 2>/dev/null) || {
    apt-get update -qq && (cd build/debs && apt-get download -qq kubernetes-client)
  }
fi

# NVIDIA's nvsmi_device_v12.dtd (the 550 driver's), cut out of Debian's nvidia-smi 550 package by
# its pinned sha256, into build/nvidia: the GPU probe fixtures are checked against it.
.venv/bin/python scripts/fetch_nvsmi_dtd.py

# The real flannel CNI plugin (Debian 11's containernetworking-plugins 0.9.0, pinned in
# bundles/profiles/lab.yml), into build/flannel-cni: the tests that run it outside the lab use it.
.venv/bin/python -m tests._support.real_flannel
