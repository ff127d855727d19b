"""Build the Lambda dependency layer into its cache (`make deps-layer`; `make bootstrap` runs it too).

`cdk synth` builds the layer itself on a cache miss (aijobs_cdk.deps_layer, through CDK's local
bundling); running this first only moves the one network step (pip, 5-15 s) out of the synth,
e.g. into CI's bootstrap or onto a machine with network access. `--rebuild` ignores the cache;
`--quiet` is silent when the cache already holds the layer.
"""

from __future__ import annotations

import argparse
import sys

from aijobs_cdk.deps_layer import DepsLayerBuildError, build, cached_layer, ensure_built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rebuild", action="store_true", help="build again even if the cache holds it")
    parser.add_argument("--quiet", action="store_true", help="print nothing when the cache holds it")
    args = parser.parse_args(argv)
    try:
        layer = build(cached_layer(), replace=True) if args.rebuild else ensure_built()
    except DepsLayerBuildError as error:
        print(f"aijobs: {error}", file=sys.stderr)
        return 1
    if args.quiet:
        return 0
    site = layer / "python"
    size = sum(path.stat().st_size for path in site.rglob("*") if path.is_file())
    packages = sorted(path.name for path in site.iterdir() if path.is_dir() and "." not in path.name)
    print(f"dependency layer {layer} ({size / 1e6:.1f} MB): {', '.join(packages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
