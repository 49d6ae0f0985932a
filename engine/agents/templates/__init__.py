"""Prompt templates (``*.md``, ``string.Template`` placeholders) and the worked example kernels.

A package only so setuptools ships these files; ``example_*.py`` are data read as text, never imported.
"""
