"""The ``tensorlang`` command line.

``tensorlang --version`` and ``tensorlang target`` (the host target tensorlang compiles for) exist
now; ``tune``, ``show``, ``cache`` and ``bench`` arrive with the autotuner.
"""

from __future__ import annotations

import argparse
import sys


def _cmd_target(args: argparse.Namespace) -> int:
    from backends.llvm.target import host_target

    t = host_target()
    print(f"triple:   {t.triple}\ncpu:      {t.cpu}\nvector:   {t.vector_bits}-bit SIMD\n"
          f"llvm:     {t.llvm_version} (llvmlite {t.llvmlite_version})")
    if args.features:
        print(f"features: {t.features}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from tensorlang import __version__

    p = argparse.ArgumentParser(
        prog="tensorlang",
        description="tensorlang: a Halide-style scheduling language and autotuner for Python.")
    p.add_argument("--version", action="version", version=f"tensorlang {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    t = sub.add_parser("target", help="show the host CPU target kernels are compiled for")
    t.add_argument("--features", action="store_true", help="also print the LLVM feature string")
    t.set_defaults(run=_cmd_target)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tensorlang`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
