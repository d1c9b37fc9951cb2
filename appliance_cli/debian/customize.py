"""mmdebstrap customize hook for the base image: `python -m appliance_cli.debian.customize ROOTFS`.

Runs on the host with the finished rootfs as argument (mmdebstrap root mode)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def customize(root: Path) -> None:
    # Air-gapped by construction: the nodes know no upstream apt source.
    disabled = root / "etc/apt/sources.list.d.disabled"
    disabled.mkdir(parents=True, exist_ok=True)
    for src in (root / "etc/apt/sources.list.d").glob("*"):
        src.replace(disabled / src.name)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)

    # The admin user the installer logs in as, with passwordless sudo.
    subprocess.run(
        ["chroot", str(root), "useradd", "-m", "-s", "/bin/bash", "-G", "sudo", "debian"], check=True
    )
    sudoers = root / "etc/sudoers.d/90-debian"
    sudoers.write_text("debian ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)

    # Per-node identity is created when a node is created, never shared through the cache.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)

    # sshd: no reverse DNS (there is no DNS in the lab); recreate host keys if ever missing.
    (root / "etc/ssh/sshd_config.d/lab.conf").write_text("UseDNS no\n")
    dropin = root / "etc/systemd/system/ssh.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "keygen.conf").write_text(
        "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n"
    )
    for p in (root / "var/lib/apt/lists").glob("*"):
        if p.is_file():
            p.unlink()
    for p in (root / "var/cache/apt").glob("*.bin"):
        p.unlink()


if __name__ == "__main__":
    customize(Path(sys.argv[1]))
