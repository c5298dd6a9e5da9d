"""Hostile input for every binding, generated with hypothesis, and the properties every
answer must have.  Shared by the fuzz tests (tests/e2e/test_fuzz.py) and the
long runs (benchmarks/fuzz.py), so that both send the same kinds of input and judge
the answers alike.

* ``strategies``: what is sent, as ``Case`` values, one strategy per binding;
* ``exchange``: sending one case over its own connection and reading what comes back;
* ``properties``: what is wrong with an answer (a list of problems, empty when none);
* ``node``: the node the fuzz runs against, and what must still work after it.
"""
