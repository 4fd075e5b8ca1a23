"""The reporting layer: notebook 09's tables and figures, built from the runs' records.

Nothing here computes a cached artefact (a checkpoint, an evaluation, calibration norms), so
:func:`frag_utils.cache.source_hash` leaves this folder out: editing a table keeps every cache.
No module outside it imports it (``tests/test_cache.py``).
"""
