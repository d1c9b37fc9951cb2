"""Debian/Ubuntu packaging that both the offline bundle and the rehearsal lab need: the cached
base root filesystem, the apt package closure of a target (in a chroot of it: aptclosure; or
resolved from the archive's indexes without it, for bundle lock: aptindex, aptresolve),
packing a .deb's files. A leaf: it imports nothing of the toolkit but errors, proc, digest and locks."""
