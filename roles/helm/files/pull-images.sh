#!/bin/sh
# Pull each image given through the CRI (crictl: the runtime's registry config, CA and
# credentials, as the kubelet would), one line per image: present, pulled, or missing with
# crictl's reason. --check: report only. Exit 0; the role judges the lines.
# crictl lives in /usr/local/bin in the lab (kube_binaries' install_path) and the script's PATH
# (ansible.builtin.script under sudo through Mitogen) may not hold it.
PATH="$PATH:/usr/local/sbin:/usr/local/bin"
# One listing first: a reference it names exactly is present, with no call per image (crictl
# `images -o json` quotes each repoTag and repoDigest); any other is asked about on its own.
check=0
if [ "$1" = "--check" ]; then check=1; shift; fi
listed=$(crictl images -o json 2>/dev/null) || listed=""
for ref in "$@"; do
  case "$listed" in
    *"\"$ref\""*) echo "present $ref"; continue ;;
  esac
  if crictl inspecti "$ref" >/dev/null 2>&1; then
    echo "present $ref"
  elif [ "$check" = 1 ]; then
    echo "absent $ref"
  elif err=$(crictl pull "$ref" 2>&1 >/dev/null); then
    echo "pulled $ref"
  else
    echo "missing $ref $(echo "$err" | tr '\n' ' ' | cut -c1-300)"
  fi
done
