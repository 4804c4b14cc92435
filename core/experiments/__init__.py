"""Experiments: prompts x models x settings over one dataset (docs/experiments.md)."""
