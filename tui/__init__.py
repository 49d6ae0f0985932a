"""Front ends of cudaforge: the Textual workbench and the command line.

Importing this package does not import Textual; only the TUI commands do, lazily.
"""
