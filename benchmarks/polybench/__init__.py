"""PolyBench/C 4.2 ported to tensorlang: ``kernels.KERNELS``; run ``benchmarks/polybench.py``."""
