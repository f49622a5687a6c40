"""What the one plan cache holds, read the way its users read it: by key kind and field name."""

import cudalibs as cl
from cudalibs.runtime import CacheEntry, KeyKind


def cached(kind: KeyKind, **fields) -> list:
    """The entries of :data:`cudalibs.plan_cache` under ``kind`` whose named fields equal
    ``fields``.  Every entry of the kind must be a :class:`CacheEntry` keyed by ``kind`` itself,
    with one value per field in the kind's order: the cache is read by those names only."""
    found = []
    for e in cl.plan_cache.entries(kind.name):
        assert isinstance(e, CacheEntry) and e.raw_key[0] is kind, e
        assert tuple(e.key) == kind.fields and e.kind == kind.name, e
        if all(e.key[f] == v for f, v in fields.items()):
            found.append(e)
    return found
