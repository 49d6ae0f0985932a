"""Colour themes for the Textual workbench.

``themes.catalog`` defines them (dark, light and a 16-colour-safe one); importing this package
alone imports nothing from Textual, so ``engine`` and ``sessions`` never pay for it.
"""
