"""Data files shipped with the engine (GPU specs, prices): a package so that they install with it."""
