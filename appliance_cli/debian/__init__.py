"""Debian/Ubuntu packaging that both the offline bundle and the rehearsal lab need: the cached
base root filesystem, the apt package closure of a target, packing a .deb's files. A leaf:
it imports nothing of the toolkit but errors, proc, digest and locks."""
