"""The reporting layer: notebook 09's tables and figures, built from the runs' records.

:mod:`.book` is notebook 09 in one object (a chapter per family, the writer); each family declares its
tables once (:class:`.book.Table`) beside the function that builds them: :mod:`.frontier`, :mod:`.paper`
(the grid's models, Tables 1 and 3, the claims), :mod:`.targets`, :mod:`.controls`, :mod:`.variants`,
:mod:`.grid`. :mod:`.recorded` finds the records; :mod:`.tables`, :mod:`.analysis` and :mod:`.stats` are
pure functions of rows, :mod:`.plots` draws the figures. Nothing here computes a cached artefact, so
:func:`frag_utils.cache.source_hash` leaves this folder out: editing a table keeps every cache.
"""
