"""TEST-ONLY stand-in for kubeadm / kubelet / kubectl / crictl v1.23.17.

One multi-call program: the lab bundle installs it (packed as one zipapp file, see ../README.md)
as /usr/local/bin/{kubeadm,kubelet,kubectl,crictl} and it dispatches on basename(argv[0]).  It
checks the real node (swap, sysctls, ports, containerd socket, tools), keeps real state
(certificates, kubeconfigs, a JSON-backed API server over mutual TLS) and fails with the real
tools' wording and exit codes.  Limits: see tests/standin/README.md.  NEVER ship this in a
production bundle.  Needs only python3 (3.11+, as on Debian 12) stdlib, python3-yaml, the openssl
CLI and containerd's ctr.
"""
