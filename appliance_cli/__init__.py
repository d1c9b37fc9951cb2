"""Provision air-gapped GPU appliances from an offline bundle."""

__version__ = "0.1.0"
