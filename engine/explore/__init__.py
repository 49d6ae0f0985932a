"""Exploration: many branches from one iteration (engine.explore.runner)."""
