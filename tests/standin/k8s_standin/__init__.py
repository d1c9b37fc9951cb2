"""TEST-ONLY stand-in for kubeadm / kubelet / crictl v1.23.17, helm and etcdutl, and the API server.

One multi-call program: the lab bundle installs it (packed as one zipapp file, see ../README.md)
as /usr/local/bin/{kubeadm,kubelet,crictl,helm} (and etcdutl for restores) and it dispatches on
basename(argv[0]); kubectl is Debian's real client, talking to this package's API server.  It
checks the real node (swap, sysctls, ports, containerd socket, tools), keeps real state
(certificates, kubeconfigs, a JSON-backed API server over mutual TLS) and fails with the real
tools' wording and exit codes.  Limits: see tests/standin/README.md.  NEVER ship this in a
production bundle.  Needs only python3 (3.11+, as on Debian 12) stdlib, python3-yaml, the openssl
CLI and containerd's ctr.
"""
