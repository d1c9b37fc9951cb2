"""Mitogen's strategy, found where molecule's ansible.cfg can name it without knowing the venv's
site-packages path (`appliance install` sets ANSIBLE_STRATEGY_PLUGINS to Mitogen's own directory)."""

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

__all__ = ["StrategyModule"]
