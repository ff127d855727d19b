"""moto's server lists its own service modules once, not on every request.

What moto does slowly (moto.backends.list_of_moto_modules): its server lists its own package
directory (a listdir and an isdir per service, about 200 system calls) for every request, twice
for an SDK request, under a lock every request takes. The patch lists it once: the installed
package does not change while the process runs. Remove when moto caches it.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (getmoto/moto#4207 is about
the first request's backend imports, not this listing; see docs/reference/moto-patches.md for the
issue we would file).
"""

from __future__ import annotations

from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"


def install(originals: dict[str, Any]) -> None:
    """Record moto's list_of_moto_modules in `originals`, then answer from one listing."""
    from moto import backends

    originals.setdefault("list_of_moto_modules", backends.list_of_moto_modules)
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
