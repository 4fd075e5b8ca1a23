"""The reporting layer: notebook 09's tables and figures, built from the runs' records.

Where to look: :mod:`.book` (notebook 09 in one object: one chapter per family, the writer); one
module per family of tables, each declaring its tables once (:class:`.book.Table`) beside the function
that builds them: :mod:`.frontier` (the healthy frontier), :mod:`.paper` (the grid's models,
Table 1, Table 3), :mod:`.claims`, :mod:`.targets` (the target's seed), :mod:`.controls` (controls
and ablations), :mod:`.variants` (attack variants), :mod:`.grid` (pilots, cost, other runs);
:mod:`.recorded` finds the records, :mod:`.tables` and :mod:`.analysis` are the paper's pure
functions of rows, :mod:`.stats` the general statistics, :mod:`.plots` the figures.

Nothing here computes a cached artefact (a checkpoint, an evaluation, calibration norms), so
:func:`frag_utils.cache.source_hash` leaves this folder out: editing a table keeps every cache.
No module outside it imports it but the runner's (``tests/test_cache.py``).
"""
