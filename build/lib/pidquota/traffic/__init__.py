"""Realistic produce-request traffic: KIP-730 PID blocks, KIP-360 epochs, rogue clients.

Pure Python and clock-free like ``quota``: event time is a parameter.
"""
