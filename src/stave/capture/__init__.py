"""In-process capture: hooks on the user's training loop (no change to their code).

``session.DoctorSession`` installs the hooks and the monitor, ``runner`` runs the user's script
like ``python script.py`` would, and ``api.watch`` offers the same as a context manager.
"""
