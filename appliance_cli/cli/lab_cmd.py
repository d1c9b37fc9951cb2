"""(being written)"""

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    return None
