#!/bin/sh
# The AOU's per-node measurements (appliance diagnose): CPU, memory and disk throughput with
# coreutils only, and the GPUs through nvidia-smi when the node has them. key=value lines.
# Writes one scratch file (DIAG_DIR, removed at the end); changes nothing else.
set -u
kv() { printf '%s=%s\n' "$1" "$2"; }
now() { date +%s.%N; }
rate() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { d = t1 - t0; if (d <= 0) d = 1e-6; printf "%.1f", b / d / 1e6 }'; }
MB=${DIAG_MB:-256}
DIAG_DIR=${DIAG_DIR:-/var/tmp}

kv virt_type "$(systemd-detect-virt --container >/dev/null 2>&1 && echo container || echo none)"
best() { awk 'BEGIN { m = 0 } { if ($1 > m) m = $1 } END { print m }'; }  # the best of the runs
# how far apart the runs were: (best - worst) / best in percent, and how many there were
spread() { awk 'BEGIN { m = 0; w = -1 } { n++; if ($1 > m) m = $1; if (w < 0 || $1 < w) w = $1 }
  END { printf "%.0f %d\n", (m > 0 ? (m - w) / m * 100 : 0), n }'; }
# Each measurement is the best of ROUNDS short runs: a shared or throttled machine's worst moment
# is noise; its best is what the hardware can do. KEY_spread says how far apart the runs were.
ROUNDS=${DIAG_ROUNDS:-3}
measured() {  # KEY RUNS: the best of the runs, and their spread
  kv "$1" "$(printf '%s\n' "$2" | best)"
  kv "${1%_mbps}_spread" "$(printf '%s\n' "$2" | spread)"
}
# CPU: one core hashing MB megabytes (MB/s)
measured cpu_sha256_mbps "$(for _ in $(seq "$ROUNDS"); do
  t0=$(now); head -c "$((MB * 1048576))" /dev/zero | sha256sum >/dev/null; t1=$(now); rate "$((MB * 1048576))" "$t0" "$t1"; echo
done)"
# memory: copying 4 x MB megabytes through the kernel (MB/s; bounded by memory bandwidth)
measured mem_copy_mbps "$(for _ in $(seq "$ROUNDS"); do
  t0=$(now); dd if=/dev/zero of=/dev/null bs=1M count="$((MB * 4))" 2>/dev/null; t1=$(now); rate "$((MB * 4 * 1048576))" "$t0" "$t1"; echo
done)"
# disk: MB megabytes written and flushed where the cluster keeps its state (MB/s), twice
f="$DIAG_DIR/appliance-diag.$$"
disk=$(for _ in 1 2; do
  t0=$(now)
  if dd if=/dev/zero of="$f" bs=1M count="$MB" conv=fsync 2>/dev/null; then t1=$(now); rate "$((MB * 1048576))" "$t0" "$t1"; echo; fi
  rm -f "$f"
done)
if [ -n "$disk" ]; then measured disk_write_mbps "$disk"; else kv disk_write_error "dd could not write $MB MB in $DIAG_DIR"; fi
if command -v nvidia-smi >/dev/null 2>&1; then
  # a header line naming the fields, then a line per GPU (read by name: core/checks/nvsmi.py)
  nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,clocks.max.sm,driver_version,persistence_mode,mig.mode.current,mig.mode.pending,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.mode.current,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending --format=csv,nounits 2>/dev/null |
    while IFS= read -r line; do kv gpu_csv "$line"; done
fi
# the kubelet: Kubernetes' own binary (ELF), or the lab's stand-in (a script that runs no pods)
if k=$(command -v kubelet 2>/dev/null); then
  case "$(head -c 4 "$k" | od -An -c | tr -d ' ')" in *ELF*) kv kubelet_kind binary ;; *) kv kubelet_kind stand-in ;; esac
else
  kv kubelet_kind absent
fi
kv diag_end 1
