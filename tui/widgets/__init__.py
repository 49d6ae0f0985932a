"""The workbench's panes: each takes plain data from :mod:`tui.model` and renders it."""
