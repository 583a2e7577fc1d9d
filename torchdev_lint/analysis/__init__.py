"""Shared knowledge that rules ask for: names, kinds of values, devices."""
