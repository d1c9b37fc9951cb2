#!/bin/sh
# The preflight probe: everything the checks read, gathered on one node in one round trip and
# printed as key=value lines (a key may repeat). Read-only: it changes nothing on the node.
# Arguments: resolve=NAME (look NAME up as the node's resolver does), path=PATH (does it exist),
# kubelet_conf=PATH (the kubelet's kubeconfig: does the node belong to a cluster), cni_dir=PATH
# (each CNI configuration there, flannel's or another's), entries=PATH (how many entries a
# directory holds), cgroup=RUNTIME:PATH (the cgroup driver a configuration file sets: containerd's
# SystemdCgroup, docker's native.cgroupdriver, the kubelet's cgroupDriver).
# POSIX sh and coreutils only: it runs before anything is installed.
set -u
kv() { printf '%s=%s\n' "$1" "$2"; }
first_line() { head -n 1 | tr -d '\r'; }
read1() { head -n 1 "$1" 2>/dev/null | tr -d '\r'; }  # a missing or unreadable file reads empty

kv probe_version 1
kv hostname "$(hostname 2>/dev/null)"
kv product_uuid "$(read1 /sys/class/dmi/id/product_uuid)"
kv machine_id "$(read1 /etc/machine-id)"
virt=$(systemd-detect-virt 2>/dev/null) || virt=none
kv virt "$virt"
if systemd-detect-virt --container >/dev/null 2>&1; then kv virt_type container; else kv virt_type "$( [ "$virt" = none ] && echo none || echo vm)"; fi
# shellcheck disable=SC1091  # the node's own file
. /etc/os-release 2>/dev/null && { kv os_id "${ID:-}"; kv os_version_id "${VERSION_ID:-}"; kv os_pretty "${PRETTY_NAME:-}"; }
kv kernel "$(uname -r)"
kv time "$(date +%s.%N)"

# hardware
kv nproc "$(nproc 2>/dev/null)"
kv mem_kb "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
kv disk_free_bytes "$(df -P -B1 /var/lib 2>/dev/null | awk 'NR == 2 {print $4}')"
for dev in /sys/class/net/*; do
  name=${dev##*/}
  [ "$name" = lo ] && continue
  [ -e "$dev/device" ] || [ -e "$dev/address" ] || continue
  kv "mac.$name" "$(read1 "$dev/address")"
  kv "operstate.$name" "$(read1 "$dev/operstate")"
  kv "speed.$name" "$(read1 "$dev/speed")"  # Mb/s; empty or -1: unknown (virtual NIC, link down)
done
for dev in /sys/bus/pci/devices/*; do
  [ -r "$dev/vendor" ] || continue
  [ "$(read1 "$dev/vendor")" = 0x10de ] || continue
  case "$(read1 "$dev/class")" in 0x03*) kv gpu_pci "${dev##*/} $(read1 "$dev/device")" ;; esac
done
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | while IFS= read -r line; do kv gpu_smi "$line"; done
  # the whole state, as NVIDIA's XML (nvsmi_device_v12.dtd), on one line (core/checks/nvsmi.py)
  xml=$(nvidia-smi -q -x 2>/dev/null | base64 | tr -d '\n') && kv gpu_xml_b64 "$xml"
fi
# Node Feature Discovery's daemons already running (by name; comm holds 15 characters): in a pod,
# whose namespace the kubelet's log directory names (/var/log/pods/NAMESPACE_NAME_UID, the UID from
# the process's cgroup: cgroupfs writes it with dashes, the systemd driver with underscores), or on
# the host. One `nfd=DAEMON WHERE` line each. (PROBE_PROC, PROBE_PODS: other roots, for the tests.)
proc_root=${PROBE_PROC:-/proc} pods_root=${PROBE_PODS:-/var/log/pods}
for d in "$proc_root"/[0-9]*; do
  { read -r comm <"$d/comm"; } 2>/dev/null || continue
  case "$comm" in nfd-worker | nfd-master | nfd-gc | nfd-topology-up*) ;; *) continue ;; esac
  uid=$(sed -n 's/.*pod\([0-9a-f]\{8\}[-_][0-9a-f]\{4\}[-_][0-9a-f]\{4\}[-_][0-9a-f]\{4\}[-_][0-9a-f]\{12\}\).*/\1/p' \
    "$d/cgroup" 2>/dev/null | head -n 1 | tr _ -)
  where=host
  if [ -n "$uid" ]; then
    where=pod
    for p in "$pods_root"/*_*_"$uid"; do
      [ -d "$p" ] || continue
      ns=${p#"$pods_root"/}
      where="namespace ${ns%%_*}"
    done
  fi
  kv nfd "$comm $where"
done
kv nouveau_loaded "$( [ -d /sys/module/nouveau ] && echo yes || echo no)"
kv nouveau_blacklisted "$(grep -rhsE '^[[:space:]]*blacklist[[:space:]]+nouveau' /etc/modprobe.d /lib/modprobe.d /usr/lib/modprobe.d | first_line)"
if [ -d /sys/firmware/efi ]; then
  sb=$(od -An -t u1 /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c 2>/dev/null | awk '{print $NF}')
  case "$sb" in 1) kv secure_boot enabled ;; 0) kv secure_boot disabled ;; *) kv secure_boot unknown ;; esac
else
  kv secure_boot legacy-bios
fi

# os and kernel settings kubeadm checks
kv swap_entries "$(tail -n +2 /proc/swaps | grep -c .)"
kv ip_forward "$(read1 /proc/sys/net/ipv4/ip_forward)"
bnf=/proc/sys/net/bridge/bridge-nf-call-iptables
if [ -e "$bnf" ]; then kv bridge_nf_call_iptables "$(read1 "$bnf")"; else kv bridge_nf_call_iptables absent; fi
kv cgroup_fs "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)"
for tool in conntrack ip iptables mount nsenter ebtables ethtool socat tc touch; do
  kv "tool.$tool" "$(command -v "$tool" 2>/dev/null)"
done

# runtime and kubernetes
kv cri_socket "$( [ -S /run/containerd/containerd.sock ] && echo present || echo absent)"
n=0
for f in /etc/kubernetes/manifests/* /etc/kubernetes/manifests/.[!.]*; do [ -e "$f" ] && n=$((n + 1)); done
kv manifests "$n"
if command -v ss >/dev/null 2>&1; then
  ss -ltnH 2>/dev/null | awk '{n = split($4, a, ":"); print a[n]}' | sort -un | while read -r port; do kv port "$port"; done
else
  # no iproute2: /proc/net/tcp{,6} state 0A = LISTEN, local port in hex
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" {split($2, a, ":"); print a[2]}' | sort -u |
    while read -r hex; do kv port "$(printf '%d' "0x$hex")"; done
fi

# Names are looked up the way kubelet and containerd will (files, then DNS; IPv4), all at once and
# each for at most RESOLVE_TIMEOUT seconds: a resolver that does not answer shows as "!timeout".
RESOLVE_TIMEOUT=3
lookup() {
  out=$(timeout "$RESOLVE_TIMEOUT" getent ahostsv4 "$1" 2>/dev/null)
  case $? in
    0) kv "resolve.$1" "$(printf '%s\n' "$out" | awk '{print $1; exit}')" ;;
    124) kv "resolve.$1" "!timeout" ;;
    *) kv "resolve.$1" "" ;;
  esac
}
# The private registry, once installed (its CA is trusted here): its /v2/ over TLS, anonymously
# (401 = up and trusted) and, where the pull password is readable (the master), with it (200). The
# password reaches curl on its standard input, never on a command line.
registry_probe() {
  addr=$1 ca=$2 auth=$3
  [ -r "$ca" ] || { kv registry_anon not-installed; return; }
  command -v curl >/dev/null 2>&1 || { kv registry_anon no-curl; return; }
  kv registry_anon "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "$ca" "https://$addr/v2/")"
  if [ -r "$auth" ]; then
    user=$(basename "$auth" .password)
    kv registry_auth "$(printf 'user = "%s:%s"\n' "$user" "$(cat "$auth")" |
      curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "$ca" -K - "https://$addr/v2/")"
  fi
}
# The site's NFS export, with the userspace client (libnfs-utils: nfs-ls, nfs-cp; it has no rm)
# as root (uid 0, through sudo where the SSH user is not root, so a filer that wants a privileged
# port sees one): listed with its free space (`nfs-ls -s`), then a probe file written and removed
# again through libnfs. The only write of the probe, on the filer, undone at once.
NFS_TIMEOUT=8
nfs_probe() {
  server=$1 path=$2 name=$3
  if ! command -v nfs-ls >/dev/null 2>&1 || ! command -v nfs-cp >/dev/null 2>&1; then kv nfs no-client; return; fi
  as_root=""
  [ "$(id -u)" = 0 ] || { sudo -n true </dev/null 2>/dev/null && as_root="sudo -n"; }
  url="nfs://$server/${path#/}"
  # shellcheck disable=SC2086  # as_root is empty or "sudo -n": split on purpose
  out=$(timeout "$NFS_TIMEOUT" $as_root nfs-ls -s "$url?uid=0&gid=0" </dev/null 2>&1)
  case $? in
    0) ;;
    124) kv nfs unreachable; kv nfs_detail "no answer within ${NFS_TIMEOUT}s"; return ;;
    *) kv nfs unreachable; kv nfs_detail "$(printf '%s\n' "$out" | grep . | first_line)"; return ;;
  esac
  kv nfs_free_bytes "$(printf '%s\n' "$out" | awk '/ bytes free/ {print $1; exit}')"
  tmp=$(mktemp) || { kv nfs no-tmp; return; }
  echo "appliance preflight write probe" >"$tmp"
  chmod 0644 "$tmp"
  # shellcheck disable=SC2086
  out=$(timeout "$NFS_TIMEOUT" $as_root nfs-cp "$tmp" "$url/$name?uid=0&gid=0" </dev/null 2>&1)
  rc=$?
  rm -f "$tmp"
  if [ "$rc" != 0 ]; then
    case $out in *ROFS*|*Read-only*) kv nfs read-only ;; *) kv nfs not-writable ;; esac
    kv nfs_detail "$(printf '%s\n' "$out" | grep . | first_line)"
    return
  fi
  kv nfs ok
  $as_root python3 - "$server" "$path" "$name" >/dev/null 2>&1 <<'PY' || kv nfs_cleanup failed
import ctypes, sys
lib = ctypes.CDLL("libnfs.so.13")
lib.nfs_init_context.restype = ctypes.c_void_p
for f in ("nfs_set_uid", "nfs_set_gid"):
    getattr(lib, f).argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.nfs_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
lib.nfs_unlink.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
ctx = lib.nfs_init_context()
lib.nfs_set_uid(ctx, 0)
lib.nfs_set_gid(ctx, 0)
sys.exit(1 if lib.nfs_mount(ctx, sys.argv[1].encode(), sys.argv[2].encode()) or lib.nfs_unlink(ctx, ("/" + sys.argv[3]).encode()) else 0)
PY
}
# A CNI configuration: flannel's (its plugin list names type flannel) or another cluster's.
cni_confs() {
  for f in "$1"/*; do
    [ -f "$f" ] || continue
    if grep -qE '"type"[[:space:]]*:[[:space:]]*"flannel"' "$f" 2>/dev/null; then kv cni_conf "${f##*/} flannel"; else kv cni_conf "${f##*/} other"; fi
  done
}
# The cgroup driver a runtime's configuration file sets ("absent": no file; "unset": not in it).
cgroup_driver() {
  kind=$1 file=$2
  [ -f "$file" ] || { kv "cgroup_driver.$kind" absent; return; }
  case $kind in
    containerd) v=$(sed -n 's/^[[:space:]]*SystemdCgroup[[:space:]]*=[[:space:]]*\([a-z]*\).*/\1/p' "$file" | first_line)
      case $v in true) v=systemd ;; false) v=cgroupfs ;; esac ;;
    docker) v=$(grep -o 'native.cgroupdriver=[a-z]*' "$file" | first_line); v=${v#native.cgroupdriver=} ;;
    kubelet) v=$(sed -n 's/^cgroupDriver:[[:space:]]*\([a-z]*\).*/\1/p' "$file" | first_line) ;;
  esac
  kv "cgroup_driver.$kind" "${v:-unset}"
}
# driver_root=PATH: the GPU Operator's driver container's root, mounted there on the host. nvidia-smi
# run in it (chroot: root, else the install user's sudo) reads the driver the container loaded.
driver_container() {
  [ -e "$1/usr/bin/nvidia-smi" ] || return 0
  set -- chroot "$1" nvidia-smi --query-gpu=driver_version --format=csv,noheader
  [ "$(id -u)" = 0 ] || set -- sudo -n "$@"
  v=$("$@" 2>/dev/null | first_line)
  kv gpu_container_driver "${v:-none}"
}
for arg in "$@"; do
  case "$arg" in
    cni_dir=*) cni_confs "${arg#cni_dir=}" ;;
    entries=*) p=${arg#entries=}; n=0
      for f in "$p"/* "$p"/.[!.]*; do [ -e "$f" ] && n=$((n + 1)); done
      kv "entries.$p" "$n" ;;
    cgroup=*) spec=${arg#cgroup=}; cgroup_driver "${spec%%:*}" "${spec#*:}" ;;
    resolve=*) lookup "${arg#resolve=}" & ;;
    path=*) p=${arg#path=}; kv "path.$p" "$( [ -e "$p" ] && echo present || echo absent)" ;;
    driver_root=*) driver_container "${arg#driver_root=}" ;;
    kubelet_conf=*) p=${arg#kubelet_conf=}; kv kubelet_conf "$( [ -e "$p" ] && echo present || echo absent)" ;;
    registry=*) spec=${arg#registry=}  # ADDRESS,CA,PASSWORD_FILE
      r_addr=${spec%%,*}; rest=${spec#*,}; r_ca=${rest%%,*}; r_auth=${rest#*,}
      registry_probe "$r_addr" "$r_ca" "$r_auth" & ;;
    nfs=*) spec=${arg#nfs=}  # SERVER,PROBE_FILE_NAME,PATH (the path last: it may hold a comma)
      n_server=${spec%%,*}; rest=${spec#*,}; n_name=${rest%%,*}; n_path=${rest#*,}
      nfs_probe "$n_server" "$n_path" "$n_name" & ;;
  esac
done
wait
kv probe_end 1
