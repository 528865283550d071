"""Qt adapters over the blocking core services: the engine process, the history store, pair downloads, and the
background task runner they share. Each runs blocking work off the GUI thread and reports back through signals.
"""
