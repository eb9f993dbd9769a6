"""The injectable fixes, one module per concern; each registers its units with
:func:`stave.inject.registry.register` on import."""
