"""Checks of a site's nodes, layer by layer: the model, the one-round-trip probe, preflight."""
