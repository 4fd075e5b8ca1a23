"""The reporting layer: notebook 09's tables and figures, built from the runs' records.

Each family declares its tables once (:class:`.book.Table`) beside the function that builds them: :mod:`.frontier`,
:mod:`.predictors`, :mod:`.paper`, :mod:`.targets`, :mod:`.controls`, :mod:`.variants`, :mod:`.grid`, listed in
chapter order by :mod:`.families`; :mod:`.book` builds and writes them,
:mod:`.recorded` finds the records, :mod:`.tables`, :mod:`.analysis` and :mod:`.stats` are pure functions of rows,
:mod:`.plots` draws the figures. Nothing here computes a cached artefact, so :func:`frag_utils.cache.source_hash`
leaves this folder out: editing a table keeps every cache.
"""
