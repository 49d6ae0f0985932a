"""Colour themes for the Textual workbench."""
