"""Fault injection: does the GPU test suite catch plausible bugs of cudalibs?

Each fault of :mod:`.catalog` is one plausible bug -- a beta treated as 0, an entry of a
mode table crossed, the last element of an output left unwritten, a relaunch patched with a
stale address -- installed by patching the place in cudalibs where that bug would live (see
:mod:`._inject`), together with the few GPU tests expected to catch it.

- ``python -m pytest <tests> -p tests.gpu.faults.plugin`` with ``CUDALIBS_FAULT=<name>``
  runs tests with one fault installed for the whole session (:mod:`.plugin`);
- ``python -m tests.gpu.faults`` runs every fault against its tests, several at once, plus
  control runs of the same tests without a fault, and writes a table of what was caught
  (:mod:`.__main__`);
- ``tests/cpu/test_fault_catalog.py`` checks, without a GPU, that every patch of the catalog
  still finds its target in the code.

Nothing here is collected as a test: no module is named ``test_*.py``.
"""
